"""The agent on PostgreSQL: injection attempts over HTTP, and proof from the server's own
statement log that everything the agent's session ran — attacks included, then full
syncs — only read."""

from __future__ import annotations

import random
import re
from decimal import Decimal

import psycopg
import pytest

from remote_agent.adapters.postgres import PostgresAdapter
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
from tests.support.oracle import keyed, normalize, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

TOKEN = "pg-agent-token-91bd"
SOURCE = "pgsec"
#: One strategy reading through /v1/extract, one through /v1/ranges (kept to two: Spark time).
STRATEGIES = ["group_hash", "range_checksum"]
VIEWS = {
    f"pgsec_{s}": (
        f"SELECT i.sku, i.name, i.stock FROM {SOURCE}.items i WHERE i.stock > 1",
        "SELECT sku, name, stock FROM items WHERE stock > 1",
        ["sku"],
        {},
        {"strategy": s},
    )
    for s in STRATEGIES
}

#: One log entry: `%m [%p] %u@%d ` then the message (see workloads.postgres.start_postgres's log_line_prefix).
ENTRY = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+ \[\d+\] (?P<user>[^@ ]*)@(?P<db>\S*) (?P<level>[A-Z]+):\s+(?P<message>.*)$"
)
#: How a statement is logged: simple protocol, or the steps of the extended protocol.
STATEMENT = re.compile(r"^(?:statement|execute [^:]+|bind [^:]+|parse [^:]+): (?P<sql>.*)$", re.S)


class Legacy:
    """The legacy database, written by its owner (the agent reads as `reader`)."""

    def __init__(self, url: str):
        self.url = url
        self.rng = random.Random(5)
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE items (sku text PRIMARY KEY, name text, cost numeric(10,2), stock integer)")
            c.execute("CREATE SEQUENCE item_numbers")
            c.execute("CREATE TABLE secrets (id text PRIMARY KEY, password text)")
            c.execute("INSERT INTO secrets VALUES ('root', 'hunter2')")
            for i in range(400):
                c.execute(
                    "INSERT INTO items VALUES (%s, %s, %s, %s)", (f"sku-{i:04d}", f"item {i}", Decimal(i) / 4, i % 7)
                )

    def change(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as c:
            skus = [r[0] for r in c.execute("SELECT sku FROM items ORDER BY sku")]
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
        with psycopg.connect(self.url, autocommit=True) as c:
            cur = c.execute(sql)
            return keyed(normalize(cur.fetchall(), [d.name for d in cur.description], normalizers), key)

    def fingerprint(self) -> tuple:
        """Rows, tables and the sequence: what any write would change."""
        with psycopg.connect(self.url, autocommit=True) as c:
            return (
                c.execute("SELECT * FROM items ORDER BY sku").fetchall(),
                c.execute("SELECT * FROM secrets ORDER BY id").fetchall(),
                c.execute(
                    "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'public'::regnamespace ORDER BY relname"
                ).fetchall(),
                c.execute("SELECT last_value, is_called FROM item_numbers").fetchone(),
            )


@pytest.fixture(scope="module")
def legacy(postgres):
    return Legacy(postgres.owner_url)


@pytest.fixture(scope="module")
def client(agent):
    with bearer_client(agent.url, TOKEN) as c:
        yield c


@pytest.fixture(scope="module")
def agent(postgres, legacy, logs_dir):
    proc = start_agent(postgres.reader_url, logs_dir, token=TOKEN, allow=["items:sku,name,stock"])
    yield proc
    proc.stop()


@pytest.mark.parametrize("endpoint", list(QUERY_ENDPOINTS))
@pytest.mark.parametrize("sql, words", payload_params(REFUSED))
def test_anything_but_a_select_over_exposed_columns_is_refused(client, legacy, endpoint, sql, words):
    before = legacy.fingerprint()
    r = post_site_query(client, endpoint, sql, ["sku"])
    assert_refused(r, words, secret="hunter2")
    assert legacy.fingerprint() == before


@pytest.mark.parametrize("endpoint", list(QUERY_ENDPOINTS))
@pytest.mark.parametrize("sql, names", payload_params(INERT))
def test_hostile_names_and_strings_stay_names_and_strings(client, legacy, endpoint, sql, names):
    before = legacy.fingerprint()
    inert_request(client, endpoint, sql, names)
    assert legacy.fingerprint() == before


def test_the_agents_connections_refuse_to_write_even_for_a_superuser(postgres):
    """The session the adapter opens is read-only by default; the owner could write otherwise."""
    adapter = PostgresAdapter(postgres.owner_url, statement_timeout_s=30)
    with adapter.read() as reader:
        conn = reader.conn
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
        assert conn.execute("SHOW transaction_read_only").fetchone()[0] == "on"
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TABLE intruder (x int)")
        conn.rollback()
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("SELECT nextval('item_numbers')")
        conn.rollback()
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("SELECT sku FROM items FOR UPDATE")


def test_full_syncs_are_exact(api, agent, legacy):
    api.add_source(SOURCE, agent.url, TOKEN)
    last = run_rounds(api, legacy, VIEWS, rounds=1)
    assert all(s["status"] == "succeeded" for s in last.values())


def agent_statements(logfile, user: str, database: str) -> list[str]:
    """The statements `user` ran in `database`, from the server's log (continuation lines joined)."""
    entries: list[dict] = []
    for line in logfile.read_text(errors="replace").splitlines():
        match = ENTRY.match(line)
        if match:
            entries.append(match.groupdict())
        elif entries:
            entries[-1]["message"] += "\n" + line
    out = []
    for e in entries:
        if e["user"] != user or e["db"] != database or e["level"] != "LOG":
            continue
        stmt = STATEMENT.match(e["message"])
        if stmt:
            out.append(stmt.group("sql").strip())
    return out


def test_the_agent_session_only_ever_read(postgres, legacy):
    """Everything above — the attacks and the syncs — as the server saw it from the agent's role."""
    statements = agent_statements(postgres.logfile, "reader", postgres.name)
    assert any("DROP TABLE items" in s for s in statements), (
        "the hostile names never reached the database: this test would prove less"
    )
    # the scans: a COPY (SELECT ...) TO STDOUT per chunk (ADBC, the default) or a server-side cursor (psycopg)
    reads = [s for s in statements if s.upper().startswith(("COPY", "DECLARE", "SELECT")) and "items" in s]
    assert reads, "no reads of the table by the agent in the log: this test would prove nothing"
    assert any(s.startswith("COPY (SELECT") for s in reads), "no binary COPY of the agent's: the audit of it is untried"
    assert sum(1 for s in statements if s.upper().startswith("BEGIN")) >= 10
    problems = statement_audit.problems(statements, statement_audit.POSTGRES)
    assert not problems, "\n".join(problems[:20])
    assert not any("hunter2" in s or "secrets" in s for s in statements), "a refused query reached the database"
