"""Column policies applied by the agent inside the read, on SQLite and PostgreSQL, real processes.

A table view of `people` hashes `ssn`, masks `card`, blocks `secret` and keeps only adults
(a row filter); its agent hashes `name` by its own --hash (the view asks to mask it: the
agent's policy wins) and blocks `note` by --block. Synced over rounds of random changes, the
view is exact and minimal against an oracle that applies the same policies here (HMAC-SHA-256
under the same key). The agent's answer to the view's own site request carries no raw value
of a hashed or masked column, while the same request without policies does (so the check
can fail); PostgreSQL's statement log shows that neither blocked column was ever read.
Caller mistakes are 422s; an agent without a hash key fails the sync with hash_key_missing.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import sqlite3
from urllib.parse import urlparse

import httpx
import psycopg
import pytest

from protocol import frames
from protocol.models import ExtractControl, SiteSpec
from tests.integration.test_security_postgres import agent_statements
from tests.support.oracle import check_sync, keyed
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

HASH_KEY = "policies-test-key"
#: Syncs of each engine's view, a change between two: the load, then updates, deletes and inserts.
ROUNDS = 2
COLUMNS = {"people.ssn": "hash", "people.card": "mask", "people.secret": "block", "people.name": "mask"}
ROW_FILTER = {"people": "age >= 18"}
VIEW_COLUMNS = ["id", "name", "ssn", "card", "age"]


def hmac_hex(value: str | None) -> str | None:
    return None if value is None else hmac.new(HASH_KEY.encode(), value.encode(), hashlib.sha256).hexdigest()


def mask(value: str | None) -> str | None:
    if value is None:
        return None
    return "*" * len(value) if len(value) <= 4 else "*" * (len(value) - 4) + value[-4:]


class People:
    """The `people` table changed at random between syncs; `truth()` applies the view's policies."""

    def __init__(self, connect, ph: str, seed: int):
        self.connect, self.ph = connect, ph
        self.rng = random.Random(seed)
        self.next_id = 1
        with self.connect() as c:
            c.cursor().execute(
                "CREATE TABLE people (id integer PRIMARY KEY, name text, ssn text, card text, age integer, "
                "secret text, note text)"
            )
        self.insert(40)

    def _row(self, i: int) -> tuple:
        r = self.rng
        return (
            i,
            r.choice(["Ann Lee", "Bo Chan", "Cy Diaz", None]),
            f"{r.randint(100, 999)}-{r.randint(10, 99)}-{r.randint(1000, 9999)}",
            r.choice([f"4111{r.randint(10**11, 10**12 - 1)}", "12", None]),
            r.choice([12, 17, 18, 40, 71, None]),
            f"secret-{r.randint(0, 10**6)}",
            f"note-{r.randint(0, 10**6)}",
        )

    def insert(self, n: int) -> None:
        rows = [self._row(self.next_id + i) for i in range(n)]
        self.next_id += n
        with self.connect() as c:
            c.cursor().executemany(f"INSERT INTO people VALUES ({', '.join([self.ph] * 7)})", rows)

    def change(self) -> None:
        with self.connect() as c:
            cur = c.cursor()
            for _ in range(6):
                _, name, ssn, card, age, secret, _note = self._row(0)
                column, value = self.rng.choice(
                    [("name", name), ("ssn", ssn), ("card", card), ("age", age), ("secret", secret)]
                )
                cur.execute(
                    f"UPDATE people SET {column} = {self.ph} WHERE id = {self.ph}",
                    (value, self.rng.randrange(1, self.next_id)),
                )
            cur.execute(f"DELETE FROM people WHERE id = {self.ph}", (self.rng.randrange(1, self.next_id),))
        self.insert(3)

    def rows(self) -> list[tuple]:
        with self.connect() as c:
            cur = c.cursor()
            cur.execute("SELECT id, name, ssn, card, age, secret, note FROM people")
            return list(cur.fetchall())

    def truth(self) -> dict:
        return keyed(
            [
                dict(zip(VIEW_COLUMNS, (i, hmac_hex(name), hmac_hex(ssn), mask(card), age)))
                for i, name, ssn, card, age, _s, _n in self.rows()
                if age is not None and age >= 18
            ],
            ["id"],
        )

    def raw_values(self) -> set[str]:
        """The values no answer may carry: every name, ssn and card longer than four characters."""
        return {v for row in self.rows() for v in row[1:4] if isinstance(v, str) and len(v) > 4}


def agent_answer(url: str, site: SiteSpec) -> list[dict]:
    """Every row of the site query as the agent answers a full extraction of it, decoded."""
    body = frames.json_frame(frames.CONTROL, ExtractControl(site=site, seed=7).model_dump())
    r = httpx.post(f"{url}/v1/extract", content=body, headers={"Content-Type": frames.MEDIA_TYPE}, timeout=60)
    assert r.status_code == 200, r.text
    got = list(frames.read_frames([r.content]))
    assert got[-1].kind == frames.SUMMARY, got[-1].json()
    return [row for f in got if f.kind == frames.UNGROUPED_ROWS for row in f.batch().to_pylist()]


@pytest.mark.engines("sqlite", "postgres")
def test_policies_hold_over_rounds(api, logs_dir, source, request):
    if source.engine == "sqlite":
        people = People(lambda: sqlite3.connect(source.owner_url), "?", seed=48)
    else:
        people = People(lambda: psycopg.connect(source.owner_url), "%s", seed=49)
        with psycopg.connect(source.owner_url, autocommit=True) as c:
            c.execute("GRANT SELECT ON people TO reader")
    name = f"pol_{source.engine}"
    agent = start_agent(
        source.reader_url,
        logs_dir,
        extra=["--hash", "people.name", "--block", "people.note"],
        env={"AGENT_HASH_KEY": HASH_KEY},
    )
    try:
        api.add_source(name, agent.url)
        exposed = {c["name"]: c for c in api.http.get(f"/v1/sources/{name}/tables").json()["tables"][0]["columns"]}
        assert "note" not in exposed and exposed["name"]["type"] == "text" and exposed["name"]["policy"] == "hash"

        view = f"{name}_people"
        body = {"name": view, "table": f"{name}.people", "columns": COLUMNS, "row_filter": ROW_FILTER}
        r = api.http.post("/v1/views", json=body)
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["columns"] == VIEW_COLUMNS and made["key"] == ["id"]
        assert made["policies"] == {"columns": COLUMNS, "row_filter": ROW_FILTER}
        assert '"age" >= 18' in made["sites"][0]["sql"] and "secret" not in made["sites"][0]["sql"]

        before: dict = {}
        for _ in range(ROUNDS):
            truth = people.truth()
            check_sync(api, view, ["id"], before, truth, api.sync(view))
            before = truth
            people.change()

        # what crosses the link: the view's own site request, and the same without its policies
        site = made["sites"][0]
        spec = SiteSpec.model_validate({"sql": site["sql"], "key": site["key"], "columns": site["columns"]})
        raw = people.raw_values()
        policed = agent_answer(agent.url, spec.model_copy(update={"policies": {"ssn": "hash", "card": "mask"}}))
        carried = {v for row in policed for v in row.values() if isinstance(v, str)}
        assert policed and not raw & carried, sorted(raw & carried)[:3]
        assert all(len(row["ssn"]) == 64 for row in policed)
        unpoliced = agent_answer(agent.url, spec)  # ssn and card are text at the source too
        assert raw & {v for row in unpoliced for v in row.values() if isinstance(v, str)}  # ssn and card, raw
        assert all(len(row["name"]) == 64 for row in unpoliced if row["name"] is not None)  # --hash holds anyway

        # the agent refuses a request that reads a column its view blocks
        blocked = spec.model_copy(
            update={"sql": site["sql"].replace('"age"', '"secret"', 1), "blocked": ["people.secret"]}
        )
        body_bytes = frames.json_frame(frames.CONTROL, ExtractControl(site=blocked, seed=7).model_dump())
        r = httpx.post(f"{agent.url}/v1/extract", content=body_bytes, headers={"Content-Type": frames.MEDIA_TYPE})
        assert r.status_code == 403, r.text

        if source.engine == "postgres":
            logfile = request.getfixturevalue("postgres_server").logfile
            statements = agent_statements(logfile, "reader", urlparse(source.reader_url).path.lstrip("/"))
            assert any('"ssn"' in s for s in statements), statements[:5]
            assert not [s for s in statements if '"secret"' in s or '"note"' in s]
    finally:
        agent.stop()


@pytest.fixture(scope="module")
def sqlite_people(api, logs_dir, tmp_path_factory):
    """A SQLite `people` behind an agent with a hash key (`polq`) and one without (`polq_nokey`)."""
    path = tmp_path_factory.mktemp("policies") / "legacy.db"
    People(lambda: sqlite3.connect(path), "?", seed=7)
    keyed_agent = start_agent(f"sqlite:///{path}", logs_dir, env={"AGENT_HASH_KEY": HASH_KEY})
    bare_agent = start_agent(f"sqlite:///{path}", logs_dir)
    api.add_source("polq", keyed_agent.url)
    api.add_source("polq_nokey", bare_agent.url)
    yield path
    keyed_agent.stop()
    bare_agent.stop()


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({"table": "polq.people", "columns": {"people.id": "hash"}}, ["key", "cannot be hashed"]),
        ({"table": "polq.people", "columns": {"people.age": "mask"}}, ["only text columns can be masked"]),
        ({"table": "polq.people", "columns": {"people.nope": "hash"}}, ["no column 'nope'"]),
        ({"table": "polq.people", "columns": {"people.ssn": "scramble"}}, ["block", "hash", "mask"]),
        ({"table": "polq.people", "row_filter": {"people": "upper(name) = 'A'"}}, ["function call upper"]),
        ({"table": "polq.people", "row_filter": {"people": "nope = 1"}}, ["column 'nope'"]),
        ({"table": "polq.people", "row_filter": {"others": "age > 1"}}, ["does not read"]),
        ({"sql": "SELECT p.id, p.secret FROM polq.people p", "columns": {"people.secret": "block"}}, ["blocks"]),
        (
            {"sql": "SELECT p.id, p.ssn FROM polq.people p WHERE p.ssn = 'x'", "columns": {"people.ssn": "hash"}},
            ["WHERE"],
        ),
    ],
)
def test_bad_policies_are_422(api, sqlite_people, body, needles):
    r = api.http.post("/v1/views", json={"name": "pol_bad", **body})
    assert r.status_code == 422, r.text
    for needle in needles:
        assert needle in r.text, r.text


def test_a_sql_view_with_policies_and_an_agent_without_key(api, sqlite_people):
    r = api.http.post(
        "/v1/views",
        json={
            "name": "polq_adults",
            "sql": "SELECT p.id, p.ssn, p.card FROM polq.people p",
            "columns": {"people.ssn": "hash", "people.card": "mask", "people.secret": "block"},
            "row_filter": {"people": "age >= 18"},
        },
    )
    assert r.status_code == 201, r.text
    assert api.sync("polq_adults")["status"] == "succeeded"
    with sqlite3.connect(sqlite_people) as c:
        want = {i: (hmac_hex(s), mask(k)) for i, s, k in c.execute("SELECT id, ssn, card FROM people WHERE age >= 18")}
    assert {row["id"]: (row["ssn"], row["card"]) for row in api.rows("polq_adults")} == want

    r = api.http.post(
        "/v1/views", json={"name": "polq_nokey_v", "table": "polq_nokey.people", "columns": {"people.ssn": "hash"}}
    )
    assert r.status_code == 201, r.text
    sync = api.sync("polq_nokey_v")
    assert sync["status"] == "failed" and sync["error_code"] == "hash_key_missing", sync
    assert "AGENT_HASH_KEY" in sync["error"]


def test_a_mirror_takes_its_tables_policies_and_a_put_keeps_them(api, sqlite_people):
    r = api.http.post(
        "/v1/sources/polq/mirror",
        json={"tables": ["people"], "columns": {"people.ssn": "hash", "people.secret": "block"}},
    )
    assert r.status_code == 200 and [v["view"] for v in r.json()["created"]] == ["polq_people"], r.text
    mirrored = api.http.get("/v1/views/polq_people").json()
    assert "secret" not in mirrored["columns"] and mirrored["policies"]["columns"] == {
        "people.ssn": "hash",
        "people.secret": "block",
    }
    r = api.http.post("/v1/sources/polq/mirror", json={"columns": {"nope.x": "hash"}})
    assert r.status_code == 422 and "nope.x" in r.text, r.text

    r = api.http.post(
        "/v1/views",
        json={"name": "polq_put", "sql": "SELECT p.id, p.ssn FROM polq.people p"} | {"columns": {"people.ssn": "hash"}},
    )
    assert r.status_code == 201, r.text
    r = api.http.put("/v1/views/polq_put", json={"sql": "SELECT p.id, p.ssn, p.age FROM polq.people p"})
    assert r.status_code == 200 and r.json()["policies"]["columns"] == {"people.ssn": "hash"}, r.text
