"""The randomized legacy database on MariaDB, with the family's traps, for the oracle rounds.

`accounts` holds a column of every troublesome type: a case- and accent-blind text,
DECIMAL, DOUBLE, TINYINT(1) holding 2, BIT(1), DATE with zero dates, TIMESTAMP and
DATETIME(6), BLOB, ENUM, SET, BIGINT UNSIGNED beyond 2**63, CHAR padding. `words` is keyed
by a text whose collation tells 'a', 'A', 'a ' and 'á' apart (nopad_bin); `tags` is keyed by
a case-blind latin1 text with values differing in case only across rounds; `ledger` joins
accounts on a composite key. `truth` reads the view's definition straight from the server.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
from decimal import Decimal

from tests.support.legacy import with_strategy
from tests.support.oracle import keyed, normalize
from workloads.mariadb import connect

WORDS = ["plain", "Ærø", "日本語", "emoji 🚀", "", "quote ' \" \\", "naïve", "NAÏVE", "trail  ", None]
#: Keys a binary collation tells apart and a case-, accent- or space-blind one would not.
KEY_WORDS = ["a", "A", "a ", "á", "Á", "b", "B", "ß", "ss", "z", "Z ", "é", "e", "E"]
#: Values of the case-blind `tags` key: one per letter, its case changing between rounds.
TAG_LETTERS = "abcdfghéäø"  # no "e": latin1_swedish_ci holds it equal to "é"
UNSIGNED_MAX = 2**64 - 1


def _utc_iso(v):
    return v.replace(tzinfo=dt.UTC).isoformat()


NORMALIZE = {
    "amount": str,
    "born": lambda v: v.isoformat(),
    "seen_at": _utc_iso,
    "local_ts": lambda v: v.isoformat(),
    "payload": lambda v: base64.b64encode(bytes(v)).decode(),
    "flag": bool,
    "big": str,
}


class Owner:
    """The legacy application's connection (MySQLdb, autocommit) to `url`, with an execute()
    that returns the cursor, as sqlite3's and psycopg's do; a context manager that closes it."""

    def __init__(self, url: str):
        self.conn = connect(url)
        # the application's own session: zero dates allowed, a zone that is not the agent's UTC
        self.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION', time_zone = '-05:00'")

    def execute(self, sql: str, params: tuple = ()):
        cur = self.conn.cursor()
        cur.execute(sql, params or None)
        return cur

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Owner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class MariadbLegacy:
    """The legacy application on MariaDB (written through `url`), changing the database at random between syncs."""

    def __init__(self, url: str, seed: int, rows: int = 300):
        self.url = url
        self.rng = random.Random(seed)
        self.next_id = 1
        c = Owner(url)
        try:
            c.execute(
                "CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner VARCHAR(40) COLLATE utf8mb4_general_ci, "
                "amount DECIMAL(12,2), ratio DOUBLE, active TINYINT(1), flag BIT(1), born DATE, "
                "seen_at TIMESTAMP(6) NULL, local_ts DATETIME(6), payload BLOB, "
                "status ENUM('open','closed','frozen'), tags SET('red','green','blue'), big BIGINT UNSIGNED, "
                "padded CHAR(6))"
            )
            c.execute(
                "CREATE TABLE ledger (branch VARCHAR(20) COLLATE utf8mb4_unicode_ci, entry INT, account BIGINT, "
                "memo TEXT, PRIMARY KEY (branch, entry))"
            )
            c.execute("CREATE TABLE words (w VARCHAR(10) COLLATE utf8mb4_nopad_bin PRIMARY KEY, n INT, note TEXT)")
            c.execute(
                "CREATE TABLE tags (tag VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_swedish_ci PRIMARY KEY, hits INT)"
            )
            for _ in range(rows):
                self._insert_account(c)
            for _ in range(rows):
                self._insert_ledger(c)
            for w in KEY_WORDS:
                c.execute("INSERT INTO words VALUES (%s, %s, %s)", (w, self.rng.randint(0, 9), self.rng.choice(WORDS)))
            for letter in TAG_LETTERS:
                c.execute("INSERT INTO tags VALUES (%s, %s)", (letter, self.rng.randint(0, 5)))
        finally:
            c.close()

    def _account(self) -> tuple:
        r = self.rng
        return (
            r.choice(WORDS),
            r.choice([None, Decimal(str(round(r.uniform(-1e6, 1e6), 2))), Decimal(0)]),
            r.choice([None, r.uniform(-1, 1), -0.0, 1e300]),
            r.choice([None, 0, 1, 2, -1]),  # TINYINT(1) is not a boolean
            r.choice([None, 0, 1]),
            r.choice([None, "0000-00-00", "2024-00-10", dt.date(1969, 7, 20), dt.date(2024, 2, 29)]),
            r.choice([None, dt.datetime(2020, 1, 1, 12, 0, 0, 123456), dt.datetime(1999, 12, 31, 23, 59, 59)]),
            r.choice([None, dt.datetime(2001, 9, 9, 1, 46, 40, 5), dt.datetime(1900, 1, 1)]),
            r.choice([None, b"", b"\x00\xff\x10", bytes(range(40))]),
            r.choice(["open", "closed", "frozen", None]),
            r.choice([None, "", "red", "red,blue", "green,blue,red"]),
            r.choice([None, 0, 2**63, UNSIGNED_MAX]),
            r.choice([None, "ab", "ab   ", " x", ""]),
        )

    def _insert_account(self, c: Owner) -> None:
        values = self._account()
        # seen_at is a TIMESTAMP: the application's session is at -05:00, so the literal is local
        c.execute(
            "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (self.next_id, *values[:4], _bit(values[4]), *values[5:]),
        )
        self.next_id += 1

    def _insert_ledger(self, c: Owner) -> None:
        r = self.rng
        c.execute(
            "INSERT IGNORE INTO ledger VALUES (%s, %s, %s, %s)",
            (r.choice(["nord", "süd", "東京", "Sud"]), r.randint(1, 400), r.randint(1, self.next_id), r.choice(WORDS)),
        )

    COLUMNS = ["owner", "amount", "ratio", "active", "flag", "born", "seen_at", "local_ts", "payload", "status"]
    COLUMNS += ["tags", "big", "padded"]

    def change(self) -> None:
        r = self.rng
        c = Owner(self.url)
        try:
            ids = [row[0] for row in c.execute("SELECT id FROM accounts").fetchall()]
            for aid in r.sample(ids, min(len(ids), r.randint(5, 30))):
                values = self._account()
                i = r.randrange(len(self.COLUMNS))
                value = _bit(values[i]) if self.COLUMNS[i] == "flag" else values[i]
                c.execute(f"UPDATE accounts SET `{self.COLUMNS[i]}` = %s WHERE id = %s", (value, aid))
            for aid in r.sample(ids, min(len(ids), r.randint(0, 6))):
                c.execute("DELETE FROM accounts WHERE id = %s", (aid,))
            for _ in range(r.randint(0, 12)):
                self._insert_account(c)
            keys = list(c.execute("SELECT branch, entry FROM ledger").fetchall())
            for branch, entry in r.sample(keys, min(len(keys), r.randint(0, 20))):
                c.execute(
                    "UPDATE ledger SET memo = %s, account = %s WHERE branch = %s AND entry = %s",
                    (r.choice(WORDS), r.randint(1, self.next_id), branch, entry),
                )
            for branch, entry in r.sample(keys, min(len(keys), r.randint(0, 5))):
                c.execute("DELETE FROM ledger WHERE branch = %s AND entry = %s", (branch, entry))
            for _ in range(r.randint(0, 10)):
                self._insert_ledger(c)
            for w in r.sample(KEY_WORDS, 4):  # keys come and go; the others change their note
                if r.random() < 0.5:
                    c.execute("DELETE FROM words WHERE w = %s", (w,))
                else:
                    c.execute("REPLACE INTO words VALUES (%s, %s, %s)", (w, r.randint(0, 9), r.choice(WORDS)))
            for letter in r.sample(TAG_LETTERS, 3):  # the same key in another case: a new key to Python
                tag = letter.upper() if r.random() < 0.5 else letter
                c.execute("UPDATE tags SET tag = %s, hits = hits + 1 WHERE tag = %s", (tag, letter))
        finally:
            c.close()

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        c = Owner(self.url)
        try:
            cur = c.conn.cursor()
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(sql)
            columns = [d[0] for d in cur.description]
            rows = normalize(cur.fetchall(), columns, normalizers)
        finally:
            c.close()
        return keyed(rows, key)


def _bit(value):
    return None if value is None else bytes([value])


_ACCOUNT_COLUMNS = "id, owner, amount, ratio, active, born, seen_at, local_ts, payload, status, tags, big, padded"

VIEWS = {
    "my_accounts": (
        "SELECT a.id, a.owner, a.amount, a.ratio, a.active, a.flag, a.born, a.seen_at, a.local_ts, a.payload, "
        "a.status, a.tags, a.big, a.padded FROM my.accounts a WHERE a.status <> 'frozen' OR a.status IS NULL",
        "SELECT id, owner, amount, ratio, active, CAST(flag AS UNSIGNED) AS flag, born, seen_at, local_ts, payload, "
        "status, tags, big, padded FROM accounts WHERE status <> 'frozen' OR status IS NULL",
        ["id"],
        NORMALIZE,
        {"strategy": "group_hash"},
    ),
    "my_ledger": (
        "SELECT l.branch, l.entry, a.id AS account_id, a.owner, l.memo FROM my.ledger l "
        "JOIN my.accounts a ON a.id = l.account WHERE a.active = 1",
        "SELECT l.branch, l.entry, a.id AS account_id, a.owner, l.memo FROM ledger l "
        "JOIN accounts a ON a.id = l.account WHERE a.active = 1",
        ["branch", "entry"],
        {},
        {"strategy": "sketch"},
    ),
    "my_words": (
        "SELECT w.w, w.n, w.note FROM my.words w",
        "SELECT w, n, note FROM words",
        ["w"],
        {},
        {"strategy": "tuple_hash"},
    ),
    "my_tags": (
        "SELECT t.tag, t.hits FROM my.tags t",
        "SELECT tag, hits FROM tags",
        ["tag"],
        {},
        {"strategy": "group_hash"},
    ),
}
VIEWS["my_accounts_sketch"] = with_strategy(VIEWS["my_accounts"], "sketch")
VIEWS["my_accounts_auto"] = with_strategy(VIEWS["my_accounts"], "auto")
VIEWS["my_accounts_ranges"] = with_strategy(VIEWS["my_accounts"], "range_checksum")
VIEWS["my_words_ranges"] = with_strategy(VIEWS["my_words"], "range_checksum")
VIEWS["my_words_sketch"] = with_strategy(VIEWS["my_words"], "sketch")
VIEWS["my_tags_full"] = with_strategy(VIEWS["my_tags"], "full_ship")
VIEWS["my_ledger_tuples"] = with_strategy(VIEWS["my_ledger"], "tuple_hash")
