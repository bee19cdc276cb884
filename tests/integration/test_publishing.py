"""One view published to both destinations by the service: a Delta Lake table and a table in a
real PostgreSQL warehouse, each applied after the view's commit, exactly once and in order.

Randomized rounds on a SQLite source: after every sync both tables, read without deltasieve's
code (deltalake; psql's driver), equal the truth read from the source, and the warehouse's
`deltasieve_applied` lists every changing sync once, in order. Then the warehouse refuses the
destination's login for two syncs: the syncs succeed, the destination says it is behind and
why, the Delta table keeps up; once the login works again it catches up in order, skipping
none and applying none twice.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from deltalake import DeltaTable

from tests.support.oracle import check_sync, keyed
from tests.support.people import KEY, VIEW_SQL, People
from workloads.harness import start_agent
from workloads.published import view_rows

pytestmark = pytest.mark.integration

SOURCE, VIEW = "pubboth", "pubboth_people"
ROLE, PASSWORD, TABLE = "publisher", "pub-secret", "wh.people"
#: Seconds the destinations are given to catch up after a sync (retries back off up to 60 s).
CATCH_UP_S = 150


def _destinations(api) -> dict:
    return {d["kind"]: d for d in api.http.get(f"/v1/views/{VIEW}").json()["destinations"]}


def _caught_up(api, sync_id: str) -> dict:
    """Both destinations once they hold `sync_id`, nothing left to apply."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        found = _destinations(api)
        if all(d["applied_sync"] == sync_id and d["lag_syncs"] == 0 for d in found.values()):
            return found
        assert time.monotonic() < deadline, f"the destinations did not catch up to {sync_id}: {found}"
        time.sleep(0.3)


def _warehouse_rows(owner: psycopg.Connection) -> dict:
    rows = owner.execute(f"SELECT id, name, city, score FROM {TABLE}").fetchall()
    return keyed(({"id": i, "name": n, "city": c, "score": s} for i, n, c, s in rows), KEY)


def _applied(owner: psycopg.Connection) -> list[str]:
    return [
        r[0] for r in owner.execute("SELECT sync_id FROM wh.deltasieve_applied WHERE view = %s ORDER BY seq", (VIEW,))
    ]


def test_both_destinations_follow_every_sync_once_and_in_order(api, postgres, tmp_path, logs_dir):
    people = People(tmp_path / "people.db", rows=1_500, seed=38)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    owner = psycopg.connect(postgres.owner_url, autocommit=True)
    owner.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
    owner.execute(f"CREATE SCHEMA wh AUTHORIZATION {ROLE}")
    # what the destination needs: its schema, and temporary tables (each delta is copied into one)
    owner.execute(f'GRANT CONNECT, TEMPORARY ON DATABASE "{postgres.name}" TO {ROLE}')
    parts = urlsplit(postgres.owner_url)
    url = urlunsplit(parts._replace(netloc=f"{ROLE}:{PASSWORD}@{parts.hostname}:{parts.port}"))
    try:
        api.add_source(SOURCE, agent.url)
        spec = [{"kind": "delta"}, {"kind": "postgres", "url": url, "table": TABLE}]
        view = api.add_view(VIEW, VIEW_SQL.format(source=SOURCE), destinations=spec)
        shown = {d["kind"]: d for d in view["destinations"]}
        assert PASSWORD not in str(view) and shown["postgres"]["table"] == TABLE, view
        before: dict = {}
        changing: list[str] = []

        def round_(refused: bool = False) -> dict:
            nonlocal before
            if changing:
                people.change(updates=40, inserts=15, deletes=8)
            truth = people.truth()
            sync = api.sync(VIEW)  # returns at the view's commit, whatever the destinations do
            check_sync(api, VIEW, KEY, before, truth, sync)
            changing.append(sync["id"])
            before = truth
            return sync

        for _ in range(3):
            sync = round_()
            found = _caught_up(api, sync["id"])
            assert keyed(view_rows(DeltaTable(found["delta"]["uri"])).to_pylist(), KEY) == before
            assert _warehouse_rows(owner) == before
            assert _applied(owner) == changing, "every changing sync once, in order"

        # the warehouse refuses the destination's login: the view goes on, the destination falls behind
        owner.execute(f"ALTER ROLE {ROLE} NOLOGIN")
        for _ in range(2):
            round_()
        deadline = time.monotonic() + CATCH_UP_S
        while not (pg := _destinations(api)["postgres"])["error"]:
            assert time.monotonic() < deadline, pg
            time.sleep(0.3)
        assert pg["lag_syncs"] >= 1 and pg["applied_sync"] == changing[2] and PASSWORD not in pg["error"], pg
        assert _applied(owner) == changing[:3]
        metrics = api.http.get("/metrics").text
        assert any(
            line.startswith("deltasieve_destination_lag_syncs") and VIEW in line and not line.endswith(" 0.0")
            for line in metrics.splitlines()
        ), "the lag shows in /metrics"

        # the login works again: caught up in order, none skipped, none twice
        owner.execute(f"ALTER ROLE {ROLE} LOGIN")
        sync = round_()
        _caught_up(api, sync["id"])
        assert _warehouse_rows(owner) == before
        assert _applied(owner) == changing, "the syncs it missed applied in order, each once"
    finally:
        owner.close()
        agent.stop()
