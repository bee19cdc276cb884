"""Agent and service as real processes over HTTP, on every legacy engine (the `source` fixture).

Randomized rounds of inserts, updates, deletes, NULLs, Unicode, integer, text, composite,
decimal and date keys and rows crossing the WHERE clause; after every sync the view equals the truth read straight from
the database, the delta is exact and the metrics count what the delta holds. On SQLite the
rounds cover every strategy; on PostgreSQL (a server the suite starts from Debian's
binaries; the agent connects as a role that may only SELECT) numerics, timestamps with and
without zone, bytea, booleans, NaN and infinities; on MariaDB the family's traps
(tests/support/mariadb_legacy.py) with every strategy the service runs there. The larger-table tests run on SQLite only:
their data comes from workloads.students, which writes SQLite.
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.support.legacy import POSTGRES_VIEWS, SQLITE_VIEWS, PostgresLegacy, Rounds, SqliteLegacy, decimal_2
from tests.support.mariadb_legacy import VIEWS as MARIADB_VIEWS
from tests.support.mariadb_legacy import MariadbLegacy
from tests.support.oracle import keyed, normalize, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROUNDS = {
    "sqlite": Rounds(
        lambda db: SqliteLegacy(db.path, seed=20261122), SQLITE_VIEWS, "src", "people_v", rounds=3, token="s3cret"
    ),
    "postgres": Rounds(
        lambda db: PostgresLegacy(db.owner_url, seed=15),
        POSTGRES_VIEWS,
        "pg",
        "pg_accounts",
        rounds=3,
        token="pg-token",
    ),
    "mariadb": Rounds(
        lambda db: MariadbLegacy(db.owner_url, seed=16), MARIADB_VIEWS, "my", "my_accounts", rounds=3, token="my-token"
    ),
}


def test_randomized_rounds_are_exact(api, source, logs_dir):
    case = ROUNDS[source.engine]
    legacy = case.legacy(source)
    agent = start_agent(source.reader_url, logs_dir, token=case.token)
    try:
        api.add_source(case.name, agent.url, case.token)
        synced = run_rounds(api, legacy, case.views, case.rounds, at_once=2)
        last = synced[case.grouped_view]
        again = api.sync(case.grouped_view)
    finally:
        agent.stop()
    # these small views run on the Arrow executor, whatever their strategy, unless they join
    # several sites (check_sync saw that an Arrow sync ran no Spark job); test_sync_steps
    # syncs a view on both executors and compares their requests
    executors = {name: (sync["metrics"]["strategy"], sync["metrics"]["executor"]) for name, sync in synced.items()}
    for name, sync in synced.items():
        m = sync["metrics"]
        assert m["executor"] == ("spark" if len(m["sites"]) > 1 else "arrow"), (name, executors)
    assert last["metrics"]["groups_sent"] > 0, f"after several rounds the statistics must produce groups: {last}"
    still = again["metrics"]
    assert still["rows_inserted"] == still["rows_updated"] == still["rows_deleted"] == 0, still
    if source.engine == "mariadb":  # no change token: the groups find that nothing changed
        assert still["groups_sent"] > 0 and "unchanged_by_token" not in still, still
    else:  # the change token finds it without reading a row
        assert still["unchanged_by_token"] and still["rows_scanned"] == 0, still


@pytest.mark.engines("sqlite")  # workloads.students writes SQLite only
@pytest.mark.parametrize("strategy", ["group_hash", None], ids=["group_hash", "default"])
def test_unchanged_source_gives_empty_delta_and_few_bytes(api, source, logs_dir, strategy):
    """Both with the paper's method and with the strategy a new view gets (auto)."""
    from workloads.students import StudentsSource

    StudentsSource(source.path, seed=3).create(20_000)
    agent = start_agent(source.reader_url, logs_dir)
    name = f"still_{strategy or 'default'}"
    try:
        api.add_source(name, agent.url)
        view = api.add_view(
            name,
            f"SELECT s.student_id, s.first_name, s.last_name, s.phone, s.address, s.birth_date FROM {name}.students s",
            **({"strategy": strategy} if strategy else {}),
        )
        assert view["strategy"] == (strategy or "auto")
        load = api.sync(name)
        assert load["metrics"]["rows_inserted"] == 20_000
        load_bytes = load["metrics"]["bytes_to_agent"] + load["metrics"]["bytes_from_agent"]
        for _ in range(2):
            sync = api.sync(name)
            assert sync["status"] == "succeeded", sync["error"]
            assert api.delta(name, sync["id"]) == []
            m = sync["metrics"]
            assert m["strategy"] == view["strategy"]
            assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == (0, 0, 0)
            moved = m["bytes_to_agent"] + m["bytes_from_agent"]
            assert moved < 0.25 * load_bytes, f"a no-change sync moved {moved} bytes, the load {load_bytes}"
            assert m["groups_changed"] == 0 and m["groups_regrouped"] == 0
    finally:
        agent.stop()


#: The strategies of the larger table, synced side by side on one table and one agent.
LARGER = ("range_checksum", "tuple_hash", "group_hash")


@pytest.mark.engines("sqlite")  # workloads.students writes SQLite only
def test_strategies_on_a_larger_table(api, source, logs_dir):
    """Enough rows that range bisection runs several rounds and groups form for real."""
    from workloads.students import StudentsSource

    db = source.path
    legacy = StudentsSource(db, seed=11)
    legacy.create(20_000)
    agent = start_agent(source.reader_url, logs_dir)
    cols = "student_id, first_name, last_name, phone, address, gpa"

    class Students:
        def change(self):
            legacy.change()

        def truth(self, sql, key, normalizers):
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                cur = c.execute(sql)
                names = [d[0] for d in cur.description]
                return keyed(normalize(cur.fetchall(), names, normalizers), key)

    try:
        api.add_source("big", agent.url)
        views = {
            f"students_{strategy}": (
                f"SELECT s.{cols.replace(', ', ', s.')} FROM big.students s WHERE s.active = 1",
                f"SELECT {cols} FROM students WHERE active = 1",
                ["student_id"],
                {"gpa": decimal_2},
                {"strategy": strategy},
            )
            for strategy in LARGER
        }
        lasts = run_rounds(api, Students(), views, 3, at_once=2)
        for strategy in LARGER:
            last = lasts[f"students_{strategy}"]["metrics"]
            load = api.http.get(f"/v1/views/students_{strategy}/syncs").json()[-1]["metrics"]
            moved, loaded = (
                last["bytes_to_agent"] + last["bytes_from_agent"],
                load["bytes_to_agent"] + load["bytes_from_agent"],
            )
            assert moved < 0.6 * loaded, (strategy, moved, loaded)
            if strategy == "range_checksum":
                # a request per round, after the change token's
                assert last["range_rounds"] >= 2 and last["round_trips"] == 1 + last["range_rounds"], last
    finally:
        agent.stop()
