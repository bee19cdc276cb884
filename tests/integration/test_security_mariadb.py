"""The agent on MariaDB: injection attempts over HTTP, the read-only guarantees of its
session each shown to hold, and proof from the server's general log that everything the
agent's connections ran — attacks included, then full syncs — only read."""

from __future__ import annotations

import random
import re
import threading
import time
from decimal import Decimal

import MySQLdb
import pytest

from remote_agent.adapters.mysql import MysqlAdapter
from remote_agent.errors import SourceUnavailable
from tests.support import statement_audit
from tests.support.agent_requests import (
    INERT,
    QUERY_ENDPOINTS,
    REFUSED,
    assert_refused,
    bearer_client,
    inert_request,
    payload_params,
    post_site_query,
)
from tests.support.mariadb_legacy import Owner
from tests.support.oracle import keyed, normalize, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

TOKEN = "my-agent-token-5f2a"
SOURCE = "mysec"
#: One strategy reading through /v1/extract, one through /v1/ranges (Spark time).
STRATEGIES = ["group_hash", "range_checksum"]
VIEWS = {
    f"mysec_{s}": (
        f"SELECT i.sku, i.name, i.stock FROM {SOURCE}.items i WHERE i.stock > 1",
        "SELECT sku, name, stock FROM items WHERE stock > 1",
        ["sku"],
        {},
        {"strategy": s},
    )
    for s in STRATEGIES
}

#: One general-log line: [time] id command argument (the time only where it changed).
ENTRY = re.compile(
    r"^(?:\d{6}\s+\d{1,2}:\d\d:\d\d)?\s+(?P<id>\d+)\s+(?P<command>[A-Z][a-z]+(?: [A-Z][a-z]+)?)\t?(?P<arg>.*)$"
)
#: What the driver itself sends at connect: the character set and autocommit off.
DRIVER = {"SET NAMES utf8mb4", "SET autocommit=0"}
#: Anything that writes, locks, changes the session's read-only state or reaches outside the database.
WRITES_OR_LOCKS = re.compile(
    r"\b(INSERT|UPDATE|DELETE|REPLACE|MERGE|CREATE|ALTER|DROP|TRUNCATE|RENAME|LOCK|UNLOCK|GRANT|REVOKE|ANALYZE"
    r"|OPTIMIZE|REPAIR|FLUSH|KILL|CALL|DO|HANDLER|LOAD|OUTFILE|DUMPFILE|LOAD_FILE|INTO|READ\s+WRITE|GET_LOCK"
    r"|RELEASE_LOCK|SLEEP|BENCHMARK|NEXTVAL|SETVAL|LAST_INSERT_ID|FOR\s+UPDATE|LOCK\s+IN\s+SHARE\s+MODE"
    r"|FOR\s+SHARE|XA|SAVEPOINT|COMMIT)\b",
    re.I,
)
#: How the audit reads the general log: quotes, the words a reading session starts with.
AUDIT = statement_audit.Dialect(
    quoted=[r"'(?:[^'\\]|''|\\.)*'", r"`(?:[^`]|``)*`"],
    reading=frozenset({"SELECT", "START", "ROLLBACK", "SET", "EXPLAIN", "SHOW"}),
    begin="START",
    read_only=lambda bare: bare == "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT",
    writes_or_locks=WRITES_OR_LOCKS,
)


class Legacy:
    """The legacy database, written by its owner (the agent reads as `reader`)."""

    def __init__(self, url: str):
        self.url = url
        self.rng = random.Random(5)
        with Owner(url) as c:
            c.execute("CREATE TABLE items (sku VARCHAR(20) PRIMARY KEY, name TEXT, cost DECIMAL(10,2), stock INT)")
            c.execute("CREATE SEQUENCE item_numbers")
            c.execute("CREATE TABLE secrets (id VARCHAR(10) PRIMARY KEY, password TEXT)")
            c.execute("INSERT INTO secrets VALUES ('root', 'hunter2')")
            for i in range(400):
                c.execute(
                    "INSERT INTO items VALUES (%s, %s, %s, %s)", (f"sku-{i:04d}", f"item {i}", Decimal(i) / 4, i % 7)
                )

    def change(self) -> None:
        with Owner(self.url) as c:
            skus = [r[0] for r in c.execute("SELECT sku FROM items ORDER BY sku").fetchall()]
            for sku in self.rng.sample(skus, 30):
                c.execute(
                    "UPDATE items SET name = %s, stock = %s WHERE sku = %s",
                    (f"renamed {self.rng.random():.6f}", self.rng.randint(0, 6), sku),
                )
            for sku in self.rng.sample(skus, 8):
                c.execute("DELETE FROM items WHERE sku = %s", (sku,))
            for n in range(12):
                c.execute("INSERT INTO items VALUES (%s, 'new', 1, %s)", (f"new-{self.rng.random():.8f}", n % 7))

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        with Owner(self.url) as c:
            cur = c.execute(sql)
            return keyed(normalize(cur.fetchall(), [d[0] for d in cur.description], normalizers), key)

    def fingerprint(self) -> tuple:
        """Rows, tables and the sequence: what any write would change."""
        with Owner(self.url) as c:
            return (
                c.execute("SELECT * FROM items ORDER BY sku").fetchall(),
                c.execute("SELECT * FROM secrets ORDER BY id").fetchall(),
                c.execute(
                    "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "ORDER BY TABLE_NAME"
                ).fetchall(),
                c.execute("SELECT next_not_cached_value FROM item_numbers").fetchall(),
            )


@pytest.fixture(scope="module")
def legacy(mariadb):
    return Legacy(mariadb.owner_url)


@pytest.fixture(scope="module")
def agent(mariadb, legacy, logs_dir):
    proc = start_agent(mariadb.reader_url, logs_dir, token=TOKEN, allow=["items:sku,name,stock"])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(agent):
    with bearer_client(agent.url, TOKEN) as c:
        yield c


def mysql(sql: str) -> str:
    """A payload in MySQL's quoting: the names the standard dialect double-quotes, in backticks.

    >>> print(mysql('SELECT "a""b".x FROM t AS "a""b" WHERE t.s = ' + "'say \\"hi\\"'"))
    SELECT `a"b`.x FROM t AS `a"b` WHERE t.s = 'say "hi"'
    """
    parts = re.split(r"('(?:[^']|'')*')", sql)  # string literals stay as they are
    return "".join(
        part
        if part.startswith("'")
        else re.sub(r'"((?:[^"]|"")*)"', lambda m: "`" + m.group(1).replace('""', '"') + "`", part)
        for part in parts
    )


@pytest.mark.parametrize("endpoint", list(QUERY_ENDPOINTS))
@pytest.mark.parametrize("sql, words", payload_params(REFUSED))
def test_anything_but_a_select_over_exposed_columns_is_refused(client, legacy, endpoint, sql, words):
    before = legacy.fingerprint()
    r = post_site_query(client, endpoint, mysql(sql), ["sku"])
    assert_refused(r, words, secret="hunter2")
    assert legacy.fingerprint() == before


@pytest.mark.parametrize("endpoint", list(QUERY_ENDPOINTS))
@pytest.mark.parametrize("sql, names", payload_params(INERT))
def test_hostile_names_and_strings_stay_names_and_strings(client, legacy, endpoint, sql, names):
    before = legacy.fingerprint()
    inert_request(client, endpoint, mysql(sql), names)
    assert legacy.fingerprint() == before


def test_the_agents_connections_refuse_to_write_even_for_the_owner(mariadb, legacy):
    """The session is read-only, and so is every read's transaction: the owner could write otherwise."""
    adapter = MysqlAdapter(mariadb.owner_url, statement_timeout_s=30)
    with adapter.session() as session, session.read() as reader:
        cur = reader.conn.cursor()
        cur.execute("SELECT @@session.tx_read_only, @@session.time_zone, @@session.max_statement_time")
        assert cur.fetchone() == (1, "+00:00", 30.0)
        for write in (
            "INSERT INTO items VALUES ('intruder', 'x', 1, 1)",
            "UPDATE items SET stock = 0",
            "SELECT NEXTVAL(item_numbers)",
            "SELECT sku FROM items FOR UPDATE",
        ):
            with pytest.raises(MySQLdb.Error, match="READ ONLY"):
                cur.execute(write)
    with Owner(mariadb.owner_url) as c:
        assert c.execute("SELECT COUNT(*) FROM items WHERE sku = 'intruder'").fetchone() == (0,)


def test_a_statement_is_bounded_by_the_servers_own_timeout(mariadb, legacy):
    adapter = MysqlAdapter(mariadb.reader_url, statement_timeout_s=0.5)
    started = time.monotonic()
    with adapter.read() as reader, pytest.raises(SourceUnavailable, match="0.5 s statement timeout"):
        # a cross join of 400^3 rows, counted: seconds of work, no row sent
        reader.rows("SELECT COUNT(*) FROM items a, items b, items c WHERE a.name <> c.name", limit=1)
    assert time.monotonic() - started < 10


def test_every_statement_of_a_read_sees_one_snapshot(mariadb, legacy):
    """START TRANSACTION ... WITH CONSISTENT SNAPSHOT: a commit between two statements of a read is not seen."""
    adapter = MysqlAdapter(mariadb.reader_url, statement_timeout_s=10)
    with adapter.read() as reader:
        first = reader.rows("SELECT COUNT(*), SUM(stock) FROM items", limit=1)
        done = threading.Event()

        def write() -> None:
            with Owner(mariadb.owner_url) as c:
                c.execute("UPDATE items SET stock = stock + 100 WHERE sku LIKE 'sku-00%%'")
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert done.wait(10), "the writer was blocked by the reader: a read must not lock"
        writer.join()
        assert reader.rows("SELECT COUNT(*), SUM(stock) FROM items", limit=1) == first
    with adapter.read() as reader:
        assert reader.rows("SELECT COUNT(*), SUM(stock) FROM items", limit=1) != first
    with Owner(mariadb.owner_url) as c:
        c.execute("UPDATE items SET stock = stock - 100 WHERE sku LIKE 'sku-00%%'")


def test_full_syncs_are_exact(api, agent, legacy):
    api.add_source(SOURCE, agent.url, TOKEN)
    last = run_rounds(api, legacy, VIEWS, rounds=1)
    assert all(s["status"] == "succeeded" for s in last.values())


def agent_statements(logfile, user: str) -> list[str]:
    """The statements the connections of `user` ran, from the general log (continuation lines joined)."""
    entries: list[dict] = []
    for line in logfile.read_text(errors="replace").splitlines():
        match = ENTRY.match(line)
        if match:
            entries.append(match.groupdict())
        elif entries:
            entries[-1]["arg"] += "\n" + line
    users: dict[str, str] = {}
    out = []
    for e in entries:
        if e["command"] == "Connect":
            users[e["id"]] = e["arg"].split("@", 1)[0].strip()
        elif e["command"] in ("Query", "Execute", "Prepare") and users.get(e["id"]) == user:
            out.append(e["arg"].strip())
    return out


def test_the_agent_session_only_ever_read(mariadb, legacy):
    """Everything above — the attacks and the syncs — as the server saw it from the agent's role."""
    statements = agent_statements(mariadb.general_log, "reader")
    assert any("DROP TABLE items" in s for s in statements), (
        "the hostile names never reached the database: this test would prove less"
    )
    starts = [s for s in statements if s.upper().startswith("START")]
    assert len(starts) >= 10, "no reads by the agent in the log: this test would prove nothing"
    assert "SET SESSION TRANSACTION READ ONLY" in statements
    problems = statement_audit.problems([s for s in statements if s not in DRIVER], AUDIT)
    assert not problems, "\n".join(problems[:20])
    assert not any("hunter2" in s or "secrets" in s for s in statements), "a refused query reached the database"
