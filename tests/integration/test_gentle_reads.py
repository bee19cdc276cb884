"""A gentle hand on the legacy database: chunked short read-only transactions, timeouts.

The agent reads the site query in key-range chunks (keyset pagination), each in its own
short read-only transaction (remote_agent/chunks.py). Here, end to end through the service:
tiny chunks give exactly the answer of one big read for every strategy on every engine
(the `source` fixture); on PostgreSQL no transaction of the agent outlives the statement
timeout while another session keeps writing; a chunk that runs too long is cancelled and
the sync fails with a clear error.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

from tests.support.legacy import POSTGRES_VIEWS, SQLITE_VIEWS, PostgresLegacy, Rounds, SqliteLegacy, with_strategy
from tests.support.mariadb_legacy import VIEWS as MARIADB_VIEWS
from tests.support.mariadb_legacy import MariadbLegacy
from tests.support.oracle import check_sync, keyed, normalize, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

#: Rows per chunk: small enough that every table here takes many chunks, and not a divisor
#: of anything in particular.
CHUNK_ROWS = 7
ROUNDS = 2
#: A read-rate cap far above what these tables need (pacing.py): recorded, barely felt.
RATE_CAP = 1_000_000
AGENT_APP = "deltasieve-agent"


def _renamed(views: dict, source_from: str, source_to: str, prefix: str) -> dict:
    """The views of the sync tests, over our own source and under our own names."""
    return {
        f"{prefix}{name}": (sql.replace(f"{source_from}.", f"{source_to}."), *rest)
        for name, (sql, *rest) in views.items()
    }


#: The PostgreSQL views, renamed.
_POSTGRES_CHUNKY = _renamed(POSTGRES_VIEWS, "pg", "chunky_pg", "chunky_")
#: Synced in tiny chunks: each table once per strategy (auto is full_ship or sketch, both
#: here); the ledger also in ranges, not twice through group_hash and sketch besides.
_POSTGRES_CHUNKED = ["chunky_pg_accounts", "chunky_pg_ledger_auto", "chunky_pg_prices_sketch", "chunky_pg_daily_sketch"]
#: One view per strategy, single and composite keys (a sync costs seconds of Spark); the
#: group_hash view must have sent units (so lookups ran in chunks) and, on SQLite, scanned
#: more than 20 chunks.
CHUNKY = {
    "sqlite": Rounds(
        lambda db: SqliteLegacy(db.path, seed=7),
        _renamed(
            {
                k: SQLITE_VIEWS[k]
                for k in ["people_v", "enrol_v", "people_tuple_hash", "people_full_ship", "enrol_ranges"]
            },
            "src",
            "chunky_sq",
            "chunky_",
        ),
        "chunky_sq",
        "chunky_people_v",
        rounds=ROUNDS,
        min_rows_scanned=20 * CHUNK_ROWS,
    ),
    "postgres": Rounds(
        lambda db: PostgresLegacy(db.owner_url, seed=8),
        {
            **{k: _POSTGRES_CHUNKY[k] for k in _POSTGRES_CHUNKED},
            "chunky_ledger_ranges": with_strategy(_POSTGRES_CHUNKY["chunky_pg_ledger"], "range_checksum"),
        },
        "chunky_pg",
        "chunky_pg_accounts",
        rounds=ROUNDS,
    ),
    # keys a binary collation tells apart, case-blind keys changing case, in 7-row chunks
    "mariadb": Rounds(
        lambda db: MariadbLegacy(db.owner_url, seed=9, rows=120),
        _renamed(
            {k: MARIADB_VIEWS[k] for k in ["my_accounts", "my_ledger", "my_words", "my_tags", "my_words_ranges"]},
            "my",
            "chunky_my",
            "chunky_",
        ),
        "chunky_my",
        "chunky_my_accounts",
        rounds=ROUNDS,
    ),
}


def test_tiny_chunks_are_exact_for_every_strategy(api, source, logs_dir):
    """On PostgreSQL the agent reads through ADBC (--arrow-reads, the default, named here so
    that the test keeps its point): each tiny chunk is read as Arrow columns, or again through
    psycopg when it holds what ADBC cannot give exactly (NaN numerics, infinite dates), so
    both readers meet in one scan."""
    case = CHUNKY[source.engine]
    legacy = case.legacy(source)
    # SQLite's agent is paced too, under a cap these tables never reach: the sync records it
    paced = ["--arrow-reads"] if source.engine == "postgres" else ["--max-rows-per-s", str(RATE_CAP)]
    extra = ["--chunk-rows", str(CHUNK_ROWS), *paced]
    agent = start_agent(source.reader_url, logs_dir, extra=extra)
    try:
        api.add_source(case.name, agent.url)
        last = run_rounds(api, legacy, case.views, case.rounds, at_once=2)
    finally:
        agent.stop()
    assert last[case.grouped_view]["metrics"]["groups_sent"] > 0, (
        "group_hash must have sent units (so lookups ran in chunks)"
    )
    assert last[case.grouped_view]["metrics"]["rows_scanned"] > case.min_rows_scanned
    if source.engine == "sqlite":
        pacing = last[case.grouped_view]["metrics"]["sites"][0]["agent_pacing"]
        assert pacing["max_rows_per_s"] == RATE_CAP and pacing["target_chunk_s"] is None, pacing
        assert pacing["chunks"] > 20 and pacing["chunk_rows_max"] == CHUNK_ROWS, pacing


class Busy:
    """The legacy application: a table, and a thread that keeps writing to it."""

    SQL = "SELECT b.id, b.grp, b.v, b.n FROM busy_pg.busy b WHERE b.grp <> 3"
    TRUTH = "SELECT id, grp, v, n FROM busy WHERE grp <> 3"
    KEY = ["id"]

    def __init__(self, url: str, rows: int):
        self.url = url
        self.next_id = rows + 1
        self.writes = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE busy (id integer PRIMARY KEY, grp integer NOT NULL, v text, n integer NOT NULL)")
            c.execute("INSERT INTO busy SELECT i, i %% 17, md5(i::text), i FROM generate_series(1, %s) i", (rows,))

    def write(self) -> None:
        rng = random.Random(5)
        try:
            with psycopg.connect(self.url, autocommit=True) as c:
                while not self._stop.is_set():
                    # Each statement its own transaction, as an OLTP application's would be.
                    c.execute(
                        "UPDATE busy SET v = md5(random()::text), n = n + 1, grp = (grp + 1) %% 17 WHERE id = %s",
                        (rng.randint(1, self.next_id),),
                    )
                    if rng.random() < 0.1:
                        c.execute("INSERT INTO busy VALUES (%s, 1, 'new', 1)", (self.next_id,))
                        self.next_id += 1
                    if rng.random() < 0.05:
                        c.execute("DELETE FROM busy WHERE id = %s", (rng.randint(1, self.next_id),))
                    self.writes += 1
                    time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()

    def truth(self) -> dict:
        with psycopg.connect(self.url, autocommit=True) as c:
            cur = c.execute(self.TRUTH)
            return keyed(normalize(cur.fetchall(), [d.name for d in cur.description], {}), self.KEY)


class Monitor:
    """Polls pg_stat_activity for the agent's backends; keeps the age of their transactions."""

    def __init__(self, url: str):
        self.url = url
        self.max_age_s = 0.0
        self.samples = 0
        self.starts: set = set()  # of transactions reading data (not the catalog)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()

    def watch(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as c:
                while not self._stop.is_set():
                    # autocommit: now() is this statement's own start, not an old one.
                    for start, age, query in c.execute(
                        "SELECT xact_start, extract(epoch FROM now() - xact_start)::float8, query FROM pg_stat_activity "
                        "WHERE application_name = %s AND datname = current_database() AND xact_start IS NOT NULL",
                        (AGENT_APP,),
                    ):
                        self.samples += 1
                        self.max_age_s = max(self.max_age_s, age)
                        if "pg_catalog" not in query:  # the schema look-ups are short anyway
                            self.starts.add(start)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()


def test_no_agent_transaction_outlives_the_bound_while_the_source_is_written(api, postgres, logs_dir):
    """Chunks of 7 rows, each its own transaction under a 2 s statement timeout, while a
    writer keeps updating, inserting and deleting: no transaction of the agent is ever
    older than the timeout, there are many of them, and the syncs succeed; once the
    writer stops, a sync is exact."""
    timeout_s = 2.0
    busy = Busy(postgres.owner_url, rows=2000)
    agent = start_agent(
        postgres.reader_url, logs_dir, extra=["--chunk-rows", str(CHUNK_ROWS), "--statement-timeout-s", str(timeout_s)]
    )
    writer = threading.Thread(target=busy.write, daemon=True)
    monitor = Monitor(postgres.owner_url)
    watcher = threading.Thread(target=monitor.watch, daemon=True)
    try:
        api.add_source("busy_pg", agent.url)
        # tuple_hash: every call is one scan, so its transactions are the scan's chunks.
        api.add_view("busy_v", Busy.SQL, strategy="tuple_hash")
        load = api.sync("busy_v")
        assert load["status"] == "succeeded", load["error"]
        writer.start()
        watcher.start()
        for _ in range(2):
            sync = api.sync("busy_v")
            assert sync["status"] == "succeeded", sync["error"]
        monitor.stop()
        busy.stop()
        watcher.join(30)
        writer.join(30)
        assert not busy.errors and not monitor.errors, (busy.errors, monitor.errors)
        assert busy.writes > 20, "the writer must really have written during the syncs"
        assert monitor.samples >= 5, f"the monitor saw the agent in a transaction only {monitor.samples} time(s)"
        # Unchunked, each sync's scan would be one transaction: two in all.
        assert len(monitor.starts) >= 10, (
            f"only {len(monitor.starts)} distinct agent transactions reading data seen: the reads are not chunked"
        )
        assert monitor.max_age_s < timeout_s, (
            f"an agent transaction was {monitor.max_age_s:.3f} s old, over the {timeout_s} s bound"
        )
        before = keyed(api.rows("busy_v"), Busy.KEY)
        truth = busy.truth()
        final = api.sync("busy_v")
        check_sync(api, "busy_v", Busy.KEY, before, truth, final)
    finally:
        monitor.stop()
        busy.stop()
        agent.stop()


def test_a_chunk_running_past_the_statement_timeout_is_cancelled_and_the_sync_fails(api, postgres, logs_dir):
    """A join that must compare 20,000 x 20,000 pairs to find that none matches cannot finish
    within 0.3 s: the server cancels it, the agent says why, the sync fails (after its
    bounded retries) with that reason, and no query of the agent is left running."""
    with psycopg.connect(postgres.owner_url, autocommit=True) as c:
        c.execute("CREATE TABLE slow_a (id integer PRIMARY KEY, v integer NOT NULL)")
        c.execute("CREATE TABLE slow_b (id integer PRIMARY KEY, v integer NOT NULL)")
        c.execute("INSERT INTO slow_a SELECT i, 0 FROM generate_series(1, 20000) i")
        c.execute("INSERT INTO slow_b SELECT i, 1 FROM generate_series(1, 20000) i")
        c.execute("ANALYZE slow_a; ANALYZE slow_b")
    agent = start_agent(postgres.reader_url, logs_dir, extra=["--statement-timeout-s", "0.3"])
    try:
        api.add_source("slow_pg", agent.url)
        api.add_view(
            "slow_v", "SELECT a.id, b.id AS b_id, a.v FROM slow_pg.slow_a a JOIN slow_pg.slow_b b ON a.v > b.v"
        )
        sync = api.sync("slow_v")
        assert sync["status"] == "failed"
        assert "statement timeout" in sync["error"] and "0.3 s" in sync["error"], sync["error"]
        with psycopg.connect(postgres.owner_url, autocommit=True) as c:
            active = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database() AND state = 'active'",
                (AGENT_APP,),
            ).fetchone()[0]
        assert active == 0, "a cancelled chunk query is still running"
    finally:
        agent.stop()
