"""The soak benchmark's legacy databases: many small tables of mixed keys, a writer that keeps changing them, and their truth.

    python -m tests.benchmarks.soak_sources --spec SPEC.json --writes-per-s 10 --seed 38

Each source (a SQLite file or a PostgreSQL database) holds tables of four kinds, in turn:
an integer key, a text key, a composite key and no key at all (a multiset view). The writer
is a process of its own, as the legacy application is: it picks a table at random and, in
one transaction, updates, inserts or deletes a row, inserts and deletes alike often so
that the tables keep their size. It stops at SIGTERM between two transactions.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

#: The kinds of table, in the order a source's tables take them.
KINDS = ("int_key", "text_key", "composite_key", "no_key")
#: Each kind's columns (SQLite types; PostgreSQL's in POSTGRES_TYPES) and key.
COLUMNS = {
    "int_key": (["id", "name", "qty"], ["id"]),
    "text_key": (["code", "name", "qty"], ["code"]),
    "composite_key": (["a", "b", "name", "qty"], ["a", "b"]),
    "no_key": (["name", "qty"], []),
}
POSTGRES_TYPES = {"INTEGER": "BIGINT"}
#: Values of `a` in a composite key: few, so that each holds many `b`.
A_VALUES = 20
#: Names drawn for the `name` column: few, so that a keyless table holds duplicate rows.
NAMES = ("ann", "bo", "cy", "dee", "eli", "fay", "gus", "hal")


@dataclass(frozen=True)
class Table:
    """One table of a source: its name, kind, columns and key."""

    source: str
    name: str
    kind: str

    @property
    def columns(self) -> list[str]:
        return COLUMNS[self.kind][0]

    @property
    def key(self) -> list[str]:
        return COLUMNS[self.kind][1]

    def ddl(self, postgres: bool) -> str:
        """CREATE TABLE for SQLite or PostgreSQL.

        >>> Table("s", "t_001", "composite_key").ddl(postgres=True)
        'CREATE TABLE t_001 (a BIGINT NOT NULL, b BIGINT NOT NULL, name TEXT, qty BIGINT, PRIMARY KEY (a, b))'
        >>> Table("s", "t_002", "no_key").ddl(postgres=False)
        'CREATE TABLE t_002 (name TEXT, qty INTEGER)'
        """
        types = {"id": "INTEGER", "code": "TEXT", "a": "INTEGER", "b": "INTEGER", "name": "TEXT", "qty": "INTEGER"}
        cols = []
        for c in self.columns:
            t = POSTGRES_TYPES.get(types[c], types[c]) if postgres else types[c]
            cols.append(f"{c} {t}" + (" NOT NULL" if c in self.key else ""))
        if self.key:
            cols.append(f"PRIMARY KEY ({', '.join(self.key)})")
        return f"CREATE TABLE {self.name} ({', '.join(cols)})"


def tables_of(source: str, count: int) -> list[Table]:
    """`count` tables of a source, the kinds in turn.

    >>> [(t.name, t.kind) for t in tables_of("sq1", 5)][3:]
    [('t_004', 'no_key'), ('t_005', 'int_key')]
    """
    return [Table(source, f"t_{i + 1:03d}", KINDS[i % len(KINDS)]) for i in range(count)]


def new_row(table: Table, rng: random.Random, serial: int) -> tuple:
    """A row to insert: its key new (`serial` grows with each insert of the run)."""
    name, qty = rng.choice(NAMES), rng.randrange(1000)
    if table.kind == "int_key":
        return (serial, name, qty)
    if table.kind == "text_key":  # the serial makes it new, the random part spreads it over the key's range
        return (f"k-{uuid.UUID(int=rng.getrandbits(128)).hex[:8]}-{serial}", name, qty)
    if table.kind == "composite_key":
        return (rng.randrange(A_VALUES), serial, name, qty)
    return (name, qty)


class Connection:
    """A connection to one source with the few statements the writer and the check need."""

    def __init__(self, kind: str, where: str):
        self.postgres = kind == "postgres"
        if self.postgres:
            self.conn: psycopg.Connection | sqlite3.Connection = psycopg.connect(where)
        else:
            self.conn = sqlite3.connect(where, timeout=60)
        #: SQLite's rowid, PostgreSQL's ctid: a row's address whatever its table's key.
        self.row_id = "ctid" if self.postgres else "rowid"
        self.mark = "%s" if self.postgres else "?"

    def execute(self, sql: str, params: tuple = ()):
        return self.conn.execute(sql.replace("?", self.mark), params)

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def rows(self, table: Table) -> Counter:
        """The table's rows as a multiset of tuples, in its columns' order."""
        out = Counter(tuple(r) for r in self.execute(f"SELECT {', '.join(table.columns)} FROM {table.name}"))
        self.commit()
        return out


def create(conn: Connection, tables: list[Table], rows: int, rng: random.Random) -> None:
    """Create the tables and fill each with `rows` rows."""
    if not conn.postgres:
        conn.execute("PRAGMA journal_mode=WAL")  # the agent reads while the writer writes
    for table in tables:
        conn.execute(table.ddl(conn.postgres))
        marks = ", ".join("?" * len(table.columns))
        for serial in range(1, rows + 1):
            conn.execute(f"INSERT INTO {table.name} VALUES ({marks})", new_row(table, rng, serial))
    conn.commit()


def write_once(conn: Connection, table: Table, rng: random.Random, serial: int) -> str:
    """One transaction of the application on `table`: an update (half the time), an insert or a delete."""
    one = f"(SELECT {conn.row_id} FROM {table.name} ORDER BY random() LIMIT 1)"
    draw = rng.random()
    if draw < 0.5:
        op = "update"
        conn.execute(
            f"UPDATE {table.name} SET qty = ?, name = ? WHERE {conn.row_id} = {one}",
            (rng.randrange(1000), rng.choice(NAMES)),
        )
    elif draw < 0.75:
        op = "insert"
        marks = ", ".join("?" * len(table.columns))
        conn.execute(f"INSERT INTO {table.name} VALUES ({marks})", new_row(table, rng, serial))
    else:
        op = "delete"
        conn.execute(f"DELETE FROM {table.name} WHERE {conn.row_id} = {one}")
    conn.commit()
    return op


def connect(source: dict) -> Connection:
    """A connection to a source of the spec: {"kind": "sqlite", "path"} or {"kind": "postgres", "url"}."""
    return Connection(source["kind"], source["path"] if source["kind"] == "sqlite" else source["url"])


def writer(spec: dict, writes_per_s: float, seed: int) -> dict:
    """Change the spec's sources at `writes_per_s` transactions a second until SIGTERM; what it did."""
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(seed + 1)  # not the draws that made the tables' rows
    conns = {name: connect(source) for name, source in spec["sources"].items()}
    tables = [Table(t["source"], t["name"], t["kind"]) for t in spec["tables"]]
    # keys above every row the load made, and above those of an earlier writer of the same files
    serial = spec["rows"] + 1 + int(time.time() * 1000) % 1_000_000_000
    done: Counter = Counter()
    next_at = time.monotonic()
    while not stop:
        table = rng.choice(tables)
        serial += 1
        try:
            done[write_once(conns[table.source], table, rng, serial)] += 1
        except (sqlite3.Error, psycopg.Error) as e:  # a lock held too long, say: counted, and on to another
            done[f"error: {type(e).__name__}"] += 1
            conns[table.source].conn.rollback()
        next_at += rng.expovariate(writes_per_s)
        time.sleep(max(0.0, next_at - time.monotonic()))
    for conn in conns.values():
        conn.close()
    return dict(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True, help="the sources and tables (written by the soak)")
    parser.add_argument("--writes-per-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--report", type=Path, help="where to write what the writer did (JSON)")
    args = parser.parse_args()
    done = writer(json.loads(args.spec.read_text()), args.writes_per_s, args.seed)
    if args.report:
        args.report.write_text(json.dumps(done))


if __name__ == "__main__":
    main()
