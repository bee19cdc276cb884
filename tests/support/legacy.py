"""The randomized legacy databases of the sync tests, one per engine.

`Rounds` says how a test runs them. Each `*Legacy` class creates its tables, changes them at random between syncs (`change()`)
and reads the truth straight from the database (`truth(sql, key, normalizers)`), as
`tests.support.oracle.run_rounds` expects; each `*_VIEWS` holds the views over it, whose
SQL names the source `src` (SQLite) or `pg` (PostgreSQL).
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import psycopg

from tests.support.oracle import keyed, normalize
from tests.support.sources import SourceDatabase


@dataclass(frozen=True)
class Rounds:
    """Randomized rounds on one engine: its legacy application and the views over it."""

    legacy: Callable[[SourceDatabase], object]
    #: name -> (view SQL, truth SQL, key, normalizers[, options]), as `run_rounds` takes them.
    views: dict
    #: The source's name in the service, as the views' SQL says it.
    name: str
    #: A group_hash view (named explicitly: auto is the default), which must send groups
    #: once the statistics exist.
    grouped_view: str
    rounds: int
    token: str | None = None
    #: Rows the grouped view's last sync must have scanned at least.
    min_rows_scanned: int = 0


# -- SQLite ---------------------------------------------------------------------------------

SQLITE_WORDS = [
    "alpha",
    "Ærø",
    "naïve café",
    "日本語テキスト",
    "emoji 🚀✨",
    "",
    "tab\there",
    "quote ' \" \\",
    "Zürich",
    "ß",
]


def decimal_2(v):
    """A number as the service shows a DECIMAL(_, 2): a string with two decimals."""
    return str(Decimal(repr(v) if isinstance(v, float) else str(v)).quantize(Decimal("0.01")))


SQLITE_PEOPLE_NORMALIZE = {"balance": decimal_2, "flag": bool}
SQLITE_VIEWS = {
    "people_v": (
        "SELECT p.id, p.name, p.city, p.score, p.balance, p.born, p.flag, p.note FROM src.people p WHERE p.score >= 20 OR p.city = 'Zürich'",
        "SELECT id, name, city, score, balance, born, flag, note FROM people WHERE score >= 20 OR city = 'Zürich'",
        ["id"],
        SQLITE_PEOPLE_NORMALIZE,
        {"strategy": "group_hash"},
    ),
    "enrol_v": (
        "SELECT e.region, e.code AS course_code, e.grade, e.person FROM src.enrol AS e WHERE e.grade <> 'X'",
        "SELECT region, code AS course_code, grade, person FROM enrol WHERE grade <> 'X'",
        ["region", "course_code"],
        {},
        {"strategy": "group_hash"},
    ),
    "joined_v": (
        "SELECT p.id, p.name, e.region, e.code, e.grade FROM src.people p JOIN src.enrol e ON e.person = p.id WHERE p.score > 10",
        "SELECT p.id, p.name, e.region, e.code, e.grade FROM people p JOIN enrol e ON e.person = p.id WHERE p.score > 10",
        ["region", "code"],  # each enrolment has one person: people's key is implied
        {},
        {"strategy": "group_hash"},
    ),
}


def with_strategy(view: tuple, strategy: str) -> tuple:
    """The same view (SQL, truth SQL, key, normalizers) through another strategy."""
    return (*view[:4], {"strategy": strategy})


# The same view through the other strategies, on the same data and rounds.
SQLITE_VIEWS["people_tuple_hash"] = with_strategy(SQLITE_VIEWS["people_v"], "tuple_hash")
SQLITE_VIEWS["people_full_ship"] = with_strategy(SQLITE_VIEWS["people_v"], "full_ship")
SQLITE_VIEWS["people_ranges"] = with_strategy(SQLITE_VIEWS["people_v"], "range_checksum")
SQLITE_VIEWS["enrol_ranges"] = with_strategy(SQLITE_VIEWS["enrol_v"], "range_checksum")
# set reconciliation: an integer key (its own fingerprint) and a composite text key (hashed)
SQLITE_VIEWS["people_sketch"] = with_strategy(SQLITE_VIEWS["people_v"], "sketch")
SQLITE_VIEWS["enrol_sketch"] = with_strategy(SQLITE_VIEWS["enrol_v"], "sketch")
SQLITE_VIEWS["joined_auto"] = with_strategy(SQLITE_VIEWS["joined_v"], "auto")
#: The views of the keyed tables (KeyedTables), over either engine: {source} is the source's name.
PRICES_VIEW = (
    "SELECT p.price, p.label, p.qty, p.note FROM {source}.prices p WHERE p.qty > 2 OR p.label IS NULL",
    "SELECT price, label, qty, note FROM prices WHERE qty > 2 OR label IS NULL",
)
DAILY_VIEW = (
    "SELECT d.day, d.branch, d.total, d.visits, d.memo FROM {source}.daily d WHERE d.visits >= 10 OR d.memo = 'alpha'",
    "SELECT day, branch, total, visits, memo FROM daily WHERE visits >= 10 OR memo = 'alpha'",
)


def keyed_view(view: tuple[str, str], source: str, key: list[str], normalizers: dict, strategy: str) -> tuple:
    sql, truth = view
    return (sql.format(source=source), truth, key, normalizers, {"strategy": strategy})


# a DECIMAL key (stored by SQLite as REAL or INTEGER) and a (DATE, integer) key (dates stored as text)
SQLITE_VIEWS["prices_sketch"] = keyed_view(PRICES_VIEW, "src", ["price"], {"price": decimal_2}, "sketch")
SQLITE_VIEWS["daily_sketch"] = keyed_view(DAILY_VIEW, "src", ["day", "branch"], {"total": decimal_2}, "sketch")
SQLITE_VIEWS["daily_auto"] = (*SQLITE_VIEWS["daily_sketch"][:4], {"strategy": "auto"})

#: Date keys: sentinels legacy applications use, both sides of the epoch, leap days, the
#: last day there is (a quarter of the draws); the rest ordinary days.
KEY_DAYS_SPECIAL = [
    dt.date(1, 1, 1),
    dt.date(1900, 1, 1),
    dt.date(1969, 12, 31),
    dt.date(1970, 1, 1),
    dt.date(2000, 2, 29),
    dt.date(2038, 1, 19),
    dt.date(9999, 12, 31),
]
KEY_DAYS = [dt.date(2024, 1, 1) + dt.timedelta(days=d) for d in range(2000)]


class KeyedTables:
    """Two tables keyed by kinds people/enrol and accounts/ledger lack, changed at random.

    `prices` is keyed by a decimal: DECIMAL(10,2) in SQLite (stored as REAL or INTEGER:
    1.1, 100), numeric(19,4) in PostgreSQL (19 digits: wider than an int64). `daily` is
    keyed by a date: (day, branch) in SQLite (the date stored as ISO text), the day alone in
    PostgreSQL. Their non-key columns take NULLs and move rows across the views' WHERE.
    Enough rows that auto prefers the sketch to shipping the table; the fourth change
    touches every row, more than the sketch is sized for, so it falls back that round.
    """

    ROWS = 2000
    BURST = 4

    def __init__(self, rng: random.Random, engine: str):
        self.rng = rng
        self.changes = 0
        self.sqlite = engine == "sqlite"
        self.p = "?" if self.sqlite else "%s"
        if self.sqlite:
            self.scale, self.limit = 2, Decimal("99999999.99")
        else:
            self.scale, self.limit = 4, Decimal("999999999999999.9999")

    def create(self, c) -> None:
        if self.sqlite:
            c.execute(
                "CREATE TABLE prices (price DECIMAL(10,2) NOT NULL PRIMARY KEY, label TEXT, qty INTEGER, note TEXT)"
            )
            c.execute(
                "CREATE TABLE daily (day DATE NOT NULL, branch INTEGER NOT NULL, total DECIMAL(10,2), visits INTEGER, memo TEXT, "
                "PRIMARY KEY (day, branch))"
            )
        else:
            c.execute("CREATE TABLE prices (price numeric(19,4) PRIMARY KEY, label text, qty integer, note text)")
            c.execute(
                "CREATE TABLE daily (day date PRIMARY KEY, branch integer NOT NULL, total numeric(12,2), visits integer, memo text)"
            )
        cur = c.cursor()  # one batch each: PostgreSQL pipelines it
        cur.executemany(self._insert("prices", 4), [self.price_row() for _ in range(self.ROWS)])
        cur.executemany(self._insert("daily", 5), [self.day_row() for _ in range(self.ROWS)])

    def _insert(self, table: str, columns: int) -> str:
        marks = ", ".join([self.p] * columns)
        if self.sqlite:
            return f"INSERT OR IGNORE INTO {table} VALUES ({marks})"
        return f"INSERT INTO {table} VALUES ({marks}) ON CONFLICT DO NOTHING"

    def price(self):
        r = self.rng
        quantum = Decimal(1).scaleb(-self.scale)
        special = [Decimal(0), quantum, -quantum, Decimal(100), Decimal("1.1"), self.limit, -self.limit]
        value = r.choice(special) if r.random() < 0.15 else Decimal(repr(round(r.uniform(-1e4, 1e4), self.scale)))
        value = value.quantize(quantum)
        return float(value) if self.sqlite else value  # what each application would bind

    def price_row(self) -> tuple:
        r = self.rng
        return (
            self.price(),
            r.choice(SQLITE_WORDS[:5] + [None]),
            r.choice([0, 1, 2, 3, 7, 100, None]),
            r.choice(SQLITE_WORDS + [None]),
        )

    def insert_price(self, c) -> None:
        c.execute(self._insert("prices", 4), self.price_row())

    def day(self):
        r = self.rng
        day = r.choice(KEY_DAYS_SPECIAL if r.random() < 0.25 else KEY_DAYS)
        return day.isoformat() if self.sqlite else day

    def day_row(self) -> tuple:
        r = self.rng
        total = r.choice([None, Decimal(repr(round(r.uniform(-1e4, 1e4), 2))), Decimal(0)])
        return (
            self.day(),
            r.randint(1, 6),
            float(total) if self.sqlite and total is not None else total,
            r.choice([None, 0, 9, 10, 11, 500]),
            r.choice(["alpha", "beta", "", None]),
        )

    def insert_day(self, c) -> None:
        c.execute(self._insert("daily", 5), self.day_row())

    def change(self, c) -> None:
        r, p = self.rng, self.p
        self.changes += 1
        if self.changes == self.BURST:  # every row changes; some cross the WHERE
            c.execute("UPDATE prices SET qty = qty + 1")
            c.execute("UPDATE daily SET visits = visits + 1")
        prices = [row[0] for row in c.execute("SELECT price FROM prices")]
        for price in r.sample(prices, min(len(prices), r.randint(3, 15))):
            if r.random() < 0.5:  # qty crosses the WHERE (qty > 2)
                c.execute(f"UPDATE prices SET qty = {p} WHERE price = {p}", (r.choice([0, 2, 3, 50, None]), price))
            else:  # a NULL label enters the view whatever the qty
                c.execute(
                    f"UPDATE prices SET label = {p}, note = {p} WHERE price = {p}",
                    (r.choice(["alpha", "Ærø", None]), r.choice(SQLITE_WORDS + [None]), price),
                )
        for price in r.sample(prices, min(len(prices), r.randint(0, 5))):
            c.execute(f"DELETE FROM prices WHERE price = {p}", (price,))
        for _ in range(r.randint(0, 8)):
            self.insert_price(c)
        days = list(c.execute("SELECT day, branch FROM daily"))
        for day, branch in r.sample(days, min(len(days), r.randint(3, 15))):
            if r.random() < 0.5:  # visits cross the WHERE (visits >= 10)
                c.execute(
                    f"UPDATE daily SET visits = {p} WHERE day = {p} AND branch = {p}",
                    (r.choice([None, 9, 10, 42]), day, branch),
                )
            else:
                total = r.choice([None, round(r.uniform(-100, 100), 2)])
                c.execute(
                    f"UPDATE daily SET total = {p}, memo = {p} WHERE day = {p} AND branch = {p}",
                    (
                        total if self.sqlite or total is None else Decimal(repr(total)),
                        r.choice(["alpha", "beta", None]),
                        day,
                        branch,
                    ),
                )
        for day, branch in r.sample(days, min(len(days), r.randint(0, 5))):
            c.execute(f"DELETE FROM daily WHERE day = {p} AND branch = {p}", (day, branch))
        for _ in range(r.randint(0, 8)):
            self.insert_day(c)


class SqliteLegacy:
    """The legacy application on SQLite, changing the database at random between syncs."""

    def __init__(self, path, seed: int):
        self.path = path
        self.rng = random.Random(seed)
        # the tables keyed by a decimal and a date draw from their own generator, so the
        # rounds of people and enrol stay what they were before these tables came
        self.key_kinds = KeyedTables(random.Random(seed + 1), "sqlite")
        with sqlite3.connect(path) as c:
            c.execute(
                "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city TEXT, score REAL, balance DECIMAL(10,2), born DATE, flag BOOLEAN, note TEXT)"
            )
            c.execute(
                "CREATE TABLE enrol (region TEXT NOT NULL, code INTEGER NOT NULL, person INTEGER, grade TEXT, PRIMARY KEY (region, code))"
            )
        self.next_id = 1
        with sqlite3.connect(path) as c:
            for _ in range(400):
                self.insert_person(c)
            for _ in range(300):
                self.insert_enrol(c)
            self.key_kinds.create(c)

    def person(self):
        r = self.rng
        return (
            r.choice(SQLITE_WORDS + [None]),
            r.choice(["Zürich", "Oslo", "Kraków", None, "Wollongong"]),
            r.choice([r.uniform(0, 40), None, 20.0, -0.0, 1e300]),
            r.choice([round(r.uniform(-1000, 1000), 2), None, 0]),
            r.choice(["2001-02-03", "1999-12-31", None, "2024-02-29"]),
            r.choice([0, 1, None]),
            r.choice(SQLITE_WORDS + [None, "x" * 300]),
        )

    def insert_person(self, c):
        c.execute("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (self.next_id, *self.person()))
        self.next_id += 1

    def insert_enrol(self, c):
        r = self.rng
        c.execute(
            "INSERT OR IGNORE INTO enrol VALUES (?, ?, ?, ?)",
            (
                r.choice(["north", "süd", "東", "west"]),
                r.randint(1, 500),
                r.randint(1, self.next_id),
                r.choice(["A", "B", "C", "X", None]),
            ),
        )

    def change(self):
        r = self.rng
        with sqlite3.connect(self.path) as c:
            ids = [row[0] for row in c.execute("SELECT id FROM people")]
            for pid in r.sample(ids, min(len(ids), r.randint(5, 40))):
                what = r.random()
                if what < 0.4:
                    c.execute(
                        "UPDATE people SET score = ? WHERE id = ?",
                        (r.choice([r.uniform(0, 40), None, 19.99, 20.0]), pid),
                    )
                elif what < 0.7:
                    c.execute(
                        "UPDATE people SET name = ?, note = ? WHERE id = ?",
                        (r.choice(SQLITE_WORDS + [None]), r.choice(SQLITE_WORDS + [None]), pid),
                    )
                elif what < 0.85:
                    c.execute(
                        "UPDATE people SET city = ?, balance = ? WHERE id = ?",
                        (r.choice(["Zürich", "Oslo", None]), r.choice([None, round(r.uniform(-5, 5), 2)]), pid),
                    )
                else:
                    c.execute(
                        "UPDATE people SET flag = ?, born = ? WHERE id = ?",
                        (r.choice([0, 1, None]), r.choice(["2000-01-01", None]), pid),
                    )
            for pid in r.sample(ids, min(len(ids), r.randint(0, 8))):
                c.execute("DELETE FROM people WHERE id = ?", (pid,))
            for _ in range(r.randint(0, 15)):
                self.insert_person(c)
            keys = list(c.execute("SELECT region, code FROM enrol"))
            for region, code in r.sample(keys, min(len(keys), r.randint(0, 25))):
                c.execute(
                    "UPDATE enrol SET grade = ?, person = ? WHERE region = ? AND code = ?",
                    (r.choice(["A", "B", "X", None]), r.randint(1, self.next_id), region, code),
                )
            for region, code in r.sample(keys, min(len(keys), r.randint(0, 6))):
                c.execute("DELETE FROM enrol WHERE region = ? AND code = ?", (region, code))
            for _ in range(r.randint(0, 10)):
                self.insert_enrol(c)
            self.key_kinds.change(c)

    def truth(self, sql: str, key: list[str], normalizers) -> dict:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as c:
            cur = c.execute(sql)
            cols = [d[0] for d in cur.description]
            rows = normalize(cur.fetchall(), cols, normalizers)
        for row in rows:  # SQLite keeps -0.0 and integers in REAL columns; JSON has one zero
            for col, v in row.items():
                if isinstance(v, float) and v == 0:
                    row[col] = 0.0
        return keyed(rows, key)


# -- PostgreSQL -----------------------------------------------------------------------------

POSTGRES_WORDS = ["plain", "Ærø", "日本語", "emoji 🚀", "", "quote ' \" \\", "naïve", None]


def _iso(v):
    return v.isoformat()


POSTGRES_NORMALIZE = {
    "amount": str,
    "seen_at": _iso,
    "born": _iso,
    "local_ts": _iso,
    "blob": lambda v: base64.b64encode(bytes(v)).decode(),
}


class PostgresLegacy:
    """The legacy application on PostgreSQL, changing the database at random between syncs."""

    def __init__(self, url: str, seed: int):
        self.url = url
        self.rng = random.Random(seed)
        self.key_kinds = KeyedTables(random.Random(seed + 1), "postgres")  # see SqliteLegacy
        self.next_id = 1
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(
                "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, amount numeric(12,2), ratio double precision, active boolean, "
                "born date, seen_at timestamptz, local_ts timestamp, blob bytea, status varchar(10))"
            )
            c.execute(
                "CREATE TABLE ledger (branch text, entry integer, account bigint, memo text, PRIMARY KEY (branch, entry))"
            )
            for _ in range(300):
                self._insert_account(c)
            for _ in range(250):
                self._insert_ledger(c)
            self.key_kinds.create(c)

    def _account(self):
        r = self.rng
        return (
            r.choice(POSTGRES_WORDS),
            r.choice([None, round(r.uniform(-1e6, 1e6), 2), 0]),
            r.choice([None, r.uniform(-1, 1), -0.0, float("nan"), float("inf")]),
            r.choice([True, False, None]),
            r.choice([None, dt.date(1969, 7, 20), dt.date(2024, 2, 29)]),
            r.choice(
                [
                    None,
                    dt.datetime(2020, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC),
                    dt.datetime(1960, 5, 5, tzinfo=dt.timezone(dt.timedelta(hours=5))),
                ]
            ),
            r.choice([None, dt.datetime(2001, 9, 9, 1, 46, 40), dt.datetime(1900, 1, 1)]),
            r.choice([None, b"", b"\x00\xff\x10", bytes(range(40))]),
            r.choice(["open", "closed", "frozen", None]),
        )

    def _insert_account(self, c):
        c.execute(
            "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", (self.next_id, *self._account())
        )
        self.next_id += 1

    def _insert_ledger(self, c):
        r = self.rng
        c.execute(
            "INSERT INTO ledger VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (
                r.choice(["nord", "süd", "東京"]),
                r.randint(1, 400),
                r.randint(1, self.next_id),
                r.choice(POSTGRES_WORDS),
            ),
        )

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
                c.execute(
                    "UPDATE ledger SET memo = %s, account = %s WHERE branch = %s AND entry = %s",
                    (r.choice(POSTGRES_WORDS), r.randint(1, self.next_id), branch, entry),
                )
            for branch, entry in r.sample(keys, min(len(keys), r.randint(0, 5))):
                c.execute("DELETE FROM ledger WHERE branch = %s AND entry = %s", (branch, entry))
            for _ in range(r.randint(0, 10)):
                self._insert_ledger(c)
            self.key_kinds.change(c)

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


POSTGRES_VIEWS = {
    "pg_accounts": (
        "SELECT a.id, a.owner, a.amount, a.ratio, a.active, a.born, a.seen_at, a.local_ts, a.blob FROM pg.accounts a WHERE a.status = 'open' OR a.status IS NULL",
        "SELECT id, owner, amount, ratio, active, born, seen_at, local_ts, blob FROM accounts WHERE status = 'open' OR status IS NULL",
        ["id"],
        POSTGRES_NORMALIZE,
        {"strategy": "group_hash"},
    ),
    "pg_ledger": (
        "SELECT l.branch, l.entry, a.id AS account_id, a.owner, l.memo FROM pg.ledger l JOIN pg.accounts a ON a.id = l.account WHERE a.active",
        "SELECT l.branch, l.entry, a.id AS account_id, a.owner, l.memo FROM ledger l JOIN accounts a ON a.id = l.account WHERE a.active",
        ["branch", "entry"],  # each ledger entry has one account
        {},
        {"strategy": "group_hash"},
    ),
}
POSTGRES_VIEWS["pg_accounts_sketch"] = with_strategy(POSTGRES_VIEWS["pg_accounts"], "sketch")
POSTGRES_VIEWS["pg_ledger_auto"] = with_strategy(POSTGRES_VIEWS["pg_ledger"], "auto")
# a numeric(19,4) key and a date key (see KeyedTables)
POSTGRES_VIEWS["pg_prices_sketch"] = keyed_view(PRICES_VIEW, "pg", ["price"], {"price": str}, "sketch")
POSTGRES_VIEWS["pg_daily_sketch"] = keyed_view(DAILY_VIEW, "pg", ["day"], {"day": _iso, "total": str}, "sketch")
POSTGRES_VIEWS["pg_prices_auto"] = (*POSTGRES_VIEWS["pg_prices_sketch"][:4], {"strategy": "auto"})
