"""Seeded table generators and change simulators for the benchmarks.

A `TableShape` says what one row of a legacy table looks like and the ways the legacy
application edits a row. A `Simulator` builds the table quickly (`executemany` in
batches) and plays rounds of the application's work: updates, most of them on a volatile
minority of rows, a few deletes and some inserts. `ChangeProfile` fixes the rates and where
the volatile rows sit (scattered over the key space, or the newest keys). `WORKLOADS`
names the benchmark's workloads.

Every `change()` reports the keys it touched, so a caller can read just those rows to learn
the round's true delta without rescanning the table.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from workloads import students

#: Rows per `executemany` while building a table: large enough to amortise the call,
#: small enough to keep one batch of ~1 KB rows well under 100 MB.
INSERT_BATCH_ROWS = 20_000
#: Multiplier of the scattered key order; odd, so `i -> i * M mod 2**32` is a bijection.
SCATTER_MULTIPLIER = 2_654_435_761


# -- change profiles ---------------------------------------------------------------------
@dataclass(frozen=True)
class ChangeProfile:
    """What the application does per round, as fractions of the live row count."""

    update: float = 0.01
    delete: float = 0.001
    insert: float = 0.005
    #: Share of rows that are volatile (0: every row is equally likely to be updated).
    volatile_fraction: float = 0.10
    #: Share of the updates that hit a volatile row.
    volatile_share: float = 0.90
    #: "scattered": a random subset of rows (new rows join it at the same rate);
    #: "newest": the most recently inserted rows.
    hot: str = "scattered"

    def to_json(self) -> dict:
        return dict(self.__dict__)


# -- table shapes --------------------------------------------------------------------------
@dataclass(frozen=True)
class Edit:
    """One way the application updates a row: `UPDATE t SET <assign> WHERE key = ?`."""

    weight: float
    assign: str
    values: Callable[[random.Random], tuple]


@dataclass(frozen=True)
class TableShape:
    table: str
    ddl: str
    columns: tuple[str, ...]
    key: str
    make_row: Callable[[random.Random, int], tuple]
    edits: tuple[Edit, ...]
    #: The view over this table, with `{source}` standing for the source's name.
    view_sql: str
    #: Statements run after `ddl` (indexes), on every engine.
    indexes: tuple[str, ...] = ()
    #: The application's last-modified column, set to its clock by every write, and its
    #: soft-delete flag (1: deleted), set instead of deleting for `soft_deletes` of the deletes.
    stamp: str | None = None
    flag: str | None = None
    soft_deletes: float = 0.0
    #: View settings every view over this table gets (`timestamps`, `delete_flags`).
    view_options: dict = field(default_factory=dict)


WORDS = (
    "account balance campus course deadline enrolment exam faculty grade invoice ledger "
    "library lecture module notice office payment policy record refund report room "
    "schedule semester student subject term transcript tutor unit visa warning the of and "
    "to in for with on by from after before under over late early new old final draft "
    "approved pending review missing updated second first annual weekly urgent minor major"
).split()
STATUSES = ("draft", "open", "review", "approved", "closed", "archived")


def _words(rng: random.Random, k: int) -> str:
    return " ".join(rng.choices(WORDS, k=k))


def _day(rng: random.Random, start: dt.date, span_days: int) -> str:
    return (start + dt.timedelta(days=rng.randrange(span_days))).isoformat()


def _phone(rng: random.Random) -> tuple:
    return (f"+61 4{rng.randint(10, 99)} {rng.randint(100, 999)} {rng.randint(100, 999)}",)


def _address_pair(rng: random.Random) -> tuple:
    address = students._address(rng)
    return (address, address)


STUDENTS = TableShape(
    table="students",
    ddl=students.SCHEMA,
    columns=tuple(students.COLUMNS),
    key="student_id",
    make_row=students.make_student,
    edits=(
        Edit(0.5, "address = ?, mailing_address = ?", _address_pair),
        Edit(0.4, "phone = ?", _phone),
        # Toggling `active` moves the row into or out of the view's WHERE.
        Edit(0.1, "active = 1 - active, gpa = ?", lambda rng: (round(rng.uniform(1.0, 7.0), 2),)),
    ),
    view_sql=(
        "SELECT s.student_id, s.first_name, s.middle_name, s.last_name, s.title, s.birth_date, s.country, "
        "s.phone, s.address, s.mailing_address, s.enrolled, s.gpa FROM {source}.students s WHERE s.active = 1"
    ),
)


#: The application's clock as SQLite writes it (UTC, microseconds), the form a stamp takes.
NOW_SQL = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def _stamped_student(rng: random.Random, key: int) -> tuple:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return (*students.make_student(rng, key), now, 0)


STAMPED = replace(
    STUDENTS,
    ddl=students.SCHEMA.replace(
        "active BOOLEAN NOT NULL",
        "active BOOLEAN NOT NULL,\n    updated_at DATETIME NOT NULL,\n    is_deleted BOOLEAN NOT NULL",
    ),
    columns=(*STUDENTS.columns, "updated_at", "is_deleted"),
    make_row=_stamped_student,
    indexes=("CREATE INDEX students_updated_at ON students (updated_at)",),
    stamp="updated_at",
    flag="is_deleted",
    soft_deletes=0.5,
    view_options={"timestamps": {"students": "updated_at"}, "delete_flags": {"students": "is_deleted"}},
)


def _document(rng: random.Random, key: int) -> tuple:
    created = _day(rng, dt.date(2012, 1, 1), 365 * 12)
    return (
        key,
        _words(rng, 8).capitalize(),
        f"{rng.choice(students.FIRST)} {rng.choice(students.LAST)}",
        rng.choice(STATUSES),
        created,
        created,
        1,
        round(rng.uniform(0, 100_000), 2),
        _words(rng, 95),
        _words(rng, 30),
        ",".join(rng.sample(WORDS, 5)),
    )


WIDE = TableShape(
    table="documents",
    ddl="""
CREATE TABLE documents (
    doc_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    author TEXT NOT NULL,
    status TEXT NOT NULL,
    created DATE NOT NULL,
    modified DATE NOT NULL,
    version INTEGER NOT NULL,
    amount DECIMAL(12,2),
    body TEXT,
    notes TEXT,
    tags TEXT
)
""",
    columns=(
        "doc_id",
        "title",
        "author",
        "status",
        "created",
        "modified",
        "version",
        "amount",
        "body",
        "notes",
        "tags",
    ),
    key="doc_id",
    make_row=_document,
    edits=(
        Edit(
            0.5,
            "status = ?, modified = ?, version = version + 1",
            lambda rng: (rng.choice(STATUSES), _day(rng, dt.date(2024, 1, 1), 700)),
        ),
        Edit(
            0.3,
            "notes = ?, modified = ?, version = version + 1",
            lambda rng: (_words(rng, 30), _day(rng, dt.date(2024, 1, 1), 700)),
        ),
        Edit(0.2, "amount = ?", lambda rng: (round(rng.uniform(0, 100_000), 2),)),
    ),
    view_sql=(
        "SELECT d.doc_id, d.title, d.author, d.status, d.created, d.modified, d.version, d.amount, d.body, "
        "d.notes, d.tags FROM {source}.documents d"
    ),
)

NARROW = TableShape(
    table="readings",
    ddl="CREATE TABLE readings (reading_id INTEGER PRIMARY KEY, value INTEGER NOT NULL)",
    columns=("reading_id", "value"),
    key="reading_id",
    make_row=lambda rng, key: (key, rng.randrange(1_000_000_000)),
    edits=(Edit(1.0, "value = ?", lambda rng: (rng.randrange(1_000_000_000),)),),
    view_sql="SELECT r.reading_id, r.value FROM {source}.readings r",
)


# -- the simulator -------------------------------------------------------------------------
@dataclass
class Change:
    """The keys one round touched (updated keys are neither deleted nor new)."""

    updated: list
    deleted: list
    inserted: list
    #: The deleted keys whose rows stay, flagged deleted (a subset of `deleted`).
    flagged: list = field(default_factory=list)

    def touched(self) -> list:
        return [*self.updated, *self.deleted, *self.inserted]

    def counts(self) -> dict:
        return {"updated": len(self.updated), "deleted": len(self.deleted), "inserted": len(self.inserted)}


@dataclass
class Simulator:
    """A SQLite legacy table and the application that changes it between syncs."""

    shape: TableShape
    profile: ChangeProfile
    path: Path
    seed: int = 7
    #: "sequential" (1, 2, 3, ...) or "scattered" (a fixed permutation of the 32-bit range).
    key_order: str = "sequential"
    alive: list = field(default_factory=list, init=False)  # keys in insertion order

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._seq = 0
        self._volatile: list = []
        self._volatile_set: set = set()
        self._insert_sql = f"INSERT INTO {self.shape.table} ({', '.join(self.shape.columns)}) VALUES ({', '.join('?' * len(self.shape.columns))})"

    def _next_key(self) -> int:
        self._seq += 1
        if self.key_order == "scattered":
            return self._seq * SCATTER_MULTIPLIER % 2**32
        return self._seq

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path)
        # The generator's own writes need no crash safety; the agent only ever reads.
        conn.execute("PRAGMA synchronous = OFF")
        return conn

    def _new_rows(self, n: int) -> list[tuple]:
        rows = []
        volatile = self.profile.hot == "scattered" and self.profile.volatile_fraction > 0
        for _ in range(n):
            key = self._next_key()
            rows.append(self.shape.make_row(self.rng, key))
            self.alive.append(key)
            if volatile and self.rng.random() < self.profile.volatile_fraction:
                self._volatile.append(key)
                self._volatile_set.add(key)
        return rows

    def create(self, rows: int) -> None:
        """Build the table with `rows` rows (any existing file is replaced)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        conn = self._connect()
        try:
            conn.execute(self.shape.ddl)
            for statement in self.shape.indexes:
                conn.execute(statement)
            left = rows
            while left > 0:
                n = min(left, INSERT_BATCH_ROWS)
                conn.executemany(self._insert_sql, self._new_rows(n))
                left -= n
            conn.commit()
        finally:
            conn.close()

    def _hot_pool(self) -> list:
        p = self.profile
        if p.volatile_fraction <= 0:
            return []
        if p.hot == "newest":
            return self.alive[-max(1, round(len(self.alive) * p.volatile_fraction)) :]
        return self._volatile

    def change(self) -> Change:
        """One round of the application's work, committed; returns the keys it touched."""
        rng, p = self.rng, self.profile
        n = len(self.alive)
        n_update, n_delete, n_insert = round(n * p.update), round(n * p.delete), round(n * p.insert)
        pool = self._hot_pool()
        hot = rng.sample(pool, min(len(pool), round(n_update * p.volatile_share))) if pool else []
        cold = rng.sample(self.alive, n_update - len(hot))
        deleted = rng.sample(self.alive, min(n_delete, n))
        gone = set(deleted)
        updated = [k for k in dict.fromkeys(hot + cold) if k not in gone]

        by_edit: dict[int, list] = {}
        weights = [e.weight for e in self.shape.edits]
        for key in updated:
            i = rng.choices(range(len(self.shape.edits)), weights)[0]
            by_edit.setdefault(i, []).append((*self.shape.edits[i].values(rng), key))
        new_rows = self._new_rows(n_insert)

        shape = self.shape
        stamp = f", {shape.stamp} = {NOW_SQL}" if shape.stamp else ""
        flagged = deleted[: round(len(deleted) * shape.soft_deletes)] if shape.flag else []
        conn = self._connect()
        try:
            for i, params in sorted(by_edit.items()):
                conn.executemany(
                    f"UPDATE {shape.table} SET {shape.edits[i].assign}{stamp} WHERE {shape.key} = ?", params
                )
            if flagged:
                keys = [(k,) for k in flagged]
                conn.executemany(f"UPDATE {shape.table} SET {shape.flag} = 1{stamp} WHERE {shape.key} = ?", keys)
            conn.executemany(
                f"DELETE FROM {shape.table} WHERE {shape.key} = ?", [(k,) for k in deleted[len(flagged) :]]
            )
            conn.executemany(self._insert_sql, new_rows)
            conn.commit()
        finally:
            conn.close()

        if gone:
            self.alive = [k for k in self.alive if k not in gone]
            if self._volatile_set & gone:
                self._volatile = [k for k in self._volatile if k not in gone]
                self._volatile_set -= gone
        return Change(updated=updated, deleted=deleted, inserted=[row[0] for row in new_rows], flagged=flagged)


# -- the benchmark's workloads -------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    shape: TableShape
    profile: ChangeProfile
    key_order: str = "sequential"

    def simulator(self, path: Path, seed: int = 7) -> Simulator:
        return Simulator(self.shape, self.profile, path, seed=seed, key_order=self.key_order)

    def to_json(self) -> dict:
        return {
            "description": self.description,
            "table": self.shape.table,
            "key_order": self.key_order,
            "profile": self.profile.to_json(),
        }


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "students",
            "the paper's student records (~150 B); a random tenth of the rows takes 90 % of the updates; keys scattered",
            STUDENTS,
            ChangeProfile(),
            key_order="scattered",
        ),
        Workload(
            "recent-hot",
            "students, but the volatile tenth is the newest keys (changes cluster on recent inserts)",
            STUDENTS,
            ChangeProfile(hot="newest"),
        ),
        Workload(
            "churn",
            "students with 10 % of the rows updated per round, uniformly",
            STUDENTS,
            ChangeProfile(update=0.10, volatile_fraction=0.0),
            key_order="scattered",
        ),
        Workload(
            "churn-50",
            "students with 50 % of the rows updated per round, uniformly (students' delete and insert rates)",
            STUDENTS,
            ChangeProfile(update=0.50, volatile_fraction=0.0),
            key_order="scattered",
        ),
        Workload(
            "wide", "documents of ~1 KB (text body and notes); students' rates and hot tenth", WIDE, ChangeProfile()
        ),
        Workload("narrow", "a key and one integer; students' rates and hot tenth", NARROW, ChangeProfile()),
        Workload(
            "students-stamped",
            "students with a last-modified column (indexed) and a soft-delete flag, set by the application; "
            "half of the deletes flag the row, half remove it; the view names both (timestamps, delete_flags)",
            STAMPED,
            ChangeProfile(),
            key_order="scattered",
        ),
    )
}
