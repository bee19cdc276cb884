"""Agent and service as real processes over HTTP, on a PostgreSQL legacy database.

The suite starts a server from Debian's binaries (one per session, a database per module); the agent connects as a role that
may only SELECT. Randomized rounds cover numerics, timestamps with and without zone,
bytea, booleans, NULLs, Unicode, a composite key and rows crossing the WHERE clause.
"""

from __future__ import annotations

import base64
import datetime as dt
import random

import psycopg
import pytest

from tests.support.oracle import keyed, normalize, run_rounds
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

ROUNDS = 6
WORDS = ["plain", "Ærø", "日本語", "emoji 🚀", "", "quote ' \" \\", "naïve", None]


def _iso(v):
    return v.isoformat()


NORMALIZE = {
    "amount": str,
    "seen_at": _iso,
    "born": _iso,
    "local_ts": _iso,
    "blob": lambda v: base64.b64encode(bytes(v)).decode(),
}


class Legacy:
    def __init__(self, url: str, seed: int):
        self.url = url
        self.rng = random.Random(seed)
        self.next_id = 1
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(
                "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, amount numeric(12,2), ratio double precision, active boolean, "
                "born date, seen_at timestamptz, local_ts timestamp, blob bytea, status varchar(10))"
            )
            c.execute("CREATE TABLE ledger (branch text, entry integer, account bigint, memo text, PRIMARY KEY (branch, entry))")
            for _ in range(300):
                self._insert_account(c)
            for _ in range(250):
                self._insert_ledger(c)

    def _account(self):
        r = self.rng
        return (
            r.choice(WORDS),
            r.choice([None, round(r.uniform(-1e6, 1e6), 2), 0]),
            r.choice([None, r.uniform(-1, 1), -0.0, float("nan"), float("inf")]),
            r.choice([True, False, None]),
            r.choice([None, dt.date(1969, 7, 20), dt.date(2024, 2, 29)]),
            r.choice([None, dt.datetime(2020, 1, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc), dt.datetime(1960, 5, 5, tzinfo=dt.timezone(dt.timedelta(hours=5)))]),
            r.choice([None, dt.datetime(2001, 9, 9, 1, 46, 40), dt.datetime(1900, 1, 1)]),
            r.choice([None, b"", b"\x00\xff\x10", bytes(range(40))]),
            r.choice(["open", "closed", "frozen", None]),
        )

    def _insert_account(self, c):
        c.execute("INSERT INTO accounts VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", (self.next_id, *self._account()))
        self.next_id += 1

    def _insert_ledger(self, c):
        r = self.rng
        c.execute("INSERT INTO ledger VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", (r.choice(["nord", "süd", "東京"]), r.randint(1, 400), r.randint(1, self.next_id), r.choice(WORDS)))

    def change(self):
        r = self.rng
        with psycopg.connect(self.url, autocommit=True) as c:
            ids = [row[0] for row in c.execute("SELECT id FROM accounts")]
            for aid in r.sample(ids, min(len(ids), r.randint(5, 30))):
                acc = self._account()
                col = r.choice(["owner", "amount", "ratio", "active", "born", "seen_at", "local_ts", "blob", "status"])
                idx = ["owner", "amount", "ratio", "active", "born", "seen_at", "local_ts", "blob", "status"].index(col)
                c.execute(f"UPDATE accounts SET {col} = %s WHERE id = %s", (acc[idx], aid))
            for aid in r.sample(ids, min(len(ids), r.randint(0, 6))):
                c.execute("DELETE FROM accounts WHERE id = %s", (aid,))
            for _ in range(r.randint(0, 12)):
                self._insert_account(c)
            keys = list(c.execute("SELECT branch, entry FROM ledger"))
            for branch, entry in r.sample(keys, min(len(keys), r.randint(0, 20))):
                c.execute("UPDATE ledger SET memo = %s, account = %s WHERE branch = %s AND entry = %s", (r.choice(WORDS), r.randint(1, self.next_id), branch, entry))
            for branch, entry in r.sample(keys, min(len(keys), r.randint(0, 5))):
                c.execute("DELETE FROM ledger WHERE branch = %s AND entry = %s", (branch, entry))
            for _ in range(r.randint(0, 10)):
                self._insert_ledger(c)

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        with psycopg.connect(self.url, autocommit=True, options="-c TimeZone=UTC") as c:
            cur = c.execute(sql)
            cols = [d.name for d in cur.description]
            rows = normalize(cur.fetchall(), cols, normalizers)
        for row in rows:  # JSON carries non-finite floats as strings
            for col, v in row.items():
                if isinstance(v, float) and v != v:
                    row[col] = "NaN"
                elif v == float("inf"):
                    row[col] = "Infinity"
        return keyed(rows, key)


VIEWS = {
    "pg_accounts": (
        "SELECT a.id, a.owner, a.amount, a.ratio, a.active, a.born, a.seen_at, a.local_ts, a.blob FROM pg.accounts a WHERE a.status = 'open' OR a.status IS NULL",
        "SELECT id, owner, amount, ratio, active, born, seen_at, local_ts, blob FROM accounts WHERE status = 'open' OR status IS NULL",
        ["id"],
        NORMALIZE,
    ),
    "pg_ledger": (
        "SELECT l.branch, l.entry, a.id AS account_id, a.owner, l.memo FROM pg.ledger l JOIN pg.accounts a ON a.id = l.account WHERE a.active",
        "SELECT l.branch, l.entry, a.id AS account_id, a.owner, l.memo FROM ledger l JOIN accounts a ON a.id = l.account WHERE a.active",
        ["branch", "entry", "account_id"],
        {},
    ),
}


def test_randomized_rounds_are_exact_on_postgres(api, postgres, logs_dir):
    legacy = Legacy(postgres.owner_url, seed=15)
    agent = start_agent(postgres.reader_url, logs_dir, token="pg-token")
    try:
        api.add_source("pg", agent.url, "pg-token")
        last = run_rounds(api, legacy, VIEWS, ROUNDS)
        assert last["pg_accounts"]["metrics"]["groups_sent"] > 0
    finally:
        agent.stop()
