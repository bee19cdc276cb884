"""Seconds to load a view into a PostgreSQL destination and to apply deltas to it, per way.

The rows are students-like (id, two names, a phone, a date, a decimal(12,2), a double, a
timestamp), generated; the table is the destination's (warehouse/destinations/postgres.py),
in a server this script starts. Load: (a) the destination's rebuild, CSV written by
Arrow's C writer into COPY ... (FORMAT csv); (b) COPY ... (FORMAT binary) fed by psycopg's
write_row (every value converted in Python); (c) ADBC's ingest (binary COPY built in C),
which cannot share a transaction with psycopg's. Apply, on the loaded table, a delta of
n lines (half updates, a quarter each inserts and deletes), each way copying it into a
temporary table first: (d) the destination's apply (INSERT ... ON CONFLICT (key) DO UPDATE
for inserts and updates, then DELETE for deletes, and its checks); (e) a DELETE joined on
the key for updates and deletes, then an INSERT.
A multiset view of the same rows without their id: (f) its rebuild, (g) an apply of n lines,
half deletes of rows it holds (by ctid, through the table's index), half inserts.

    python scripts/pg_destination_load.py --rows 1000000 --repeat 3

Results (2026-11-27, 1M rows, PostgreSQL 15 on loopback, fsync off, 2 cores shared with
other work, median of 3; two earlier runs, under heavier load and before the rebuild built
its key after the load, were 2-3x slower with the same ranks, (d) and (e) within each
other's noise):

| way | median s | runs (s) |
|---|---:|---|
| (a) rebuild: CSV COPY | 5.92 | 6.32, 5.82, 5.92 |
| (b) binary COPY, psycopg write_row | 10.56 | 12.84, 9.91, 10.56 |
| (c) ADBC ingest (binary COPY in C) | 4.26 | 4.26, 3.64, 4.27 |
| (d) apply 1,000 lines: ON CONFLICT DO UPDATE + DELETE | 0.15 | 0.15, 0.15, 0.11 |
| (d) apply 10,000 lines: ON CONFLICT DO UPDATE + DELETE | 0.54 | 0.54, 0.63, 0.43 |
| (d) apply 100,000 lines: ON CONFLICT DO UPDATE + DELETE | 2.17 | 2.17, 3.17, 2.05 |
| (e) apply 1,000 lines: DELETE + INSERT | 0.13 | 0.11, 0.13, 0.13 |
| (e) apply 10,000 lines: DELETE + INSERT | 0.61 | 0.63, 0.61, 0.37 |
| (e) apply 100,000 lines: DELETE + INSERT | 2.62 | 2.62, 3.43, 2.36 |
| (f) multiset rebuild: CSV COPY | 6.36 | 8.50, 6.36, 4.52 |
| (g) multiset apply 1,000 lines (half deletes by ctid) | 0.09 | 0.16, 0.04, 0.09 |
| (g) multiset apply 10,000 lines (half deletes by ctid) | 0.46 | 0.55, 0.31, 0.46 |
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deltasieve_protocol.types import Column, LogicalType  # noqa: E402
from warehouse.destinations.postgres import PostgresDestination  # noqa: E402
from warehouse.destinations.postgres_copy import csv_chunks  # noqa: E402
from warehouse.multisets.multiset import COUNT  # noqa: E402
from warehouse.names import OP  # noqa: E402
from workloads.postgres import start_postgres  # noqa: E402

COLUMNS = [
    Column(n, LogicalType.parse(t))
    for n, t in [
        ("id", "int"),
        ("first_name", "text"),
        ("last_name", "text"),
        ("phone", "text"),
        ("birth_date", "date"),
        ("fee", "decimal(12,2)"),
        ("score", "float"),
        ("updated", "timestamp"),
    ]
]


def students(ids: np.ndarray, seed: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    n = len(ids)
    names = np.array(["Ada", "Ørjan", "Li", "Grace", "Mbali", "José", "Nils", "Zoë"])
    cents = rng.integers(0, 10**9, n)
    return pa.record_batch(
        {
            "id": pa.array(ids, pa.int64()),
            "first_name": pa.array(names[rng.integers(0, len(names), n)]),
            "last_name": pa.array(np.char.add("name-", rng.integers(0, 10**6, n).astype(str))),
            "phone": pa.array(np.char.add("+41 ", rng.integers(10**8, 10**9, n).astype(str))),
            "birth_date": pa.array(rng.integers(0, 20000, n).astype("int32"), pa.int32()).cast(pa.date32()),
            "fee": pa.array([Decimal(int(c)).scaleb(-2) for c in cents], pa.decimal128(12, 2)),
            "score": pa.array(rng.normal(50, 20, n)),
            "updated": pa.array(rng.integers(0, 10**15, n), pa.int64()).cast(pa.timestamp("us")),
        }
    )


def binary_copy(url: str, rows: pa.RecordBatch) -> None:
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE b (LIKE wh.students)")
        with cur.copy("COPY b FROM STDIN (FORMAT binary)") as copy:
            copy.set_types(["int8", "text", "text", "text", "date", "numeric", "float8", "timestamp"])
            for row in zip(*(rows.column(c.name).to_pylist() for c in COLUMNS)):
                copy.write_row(row)


def adbc_ingest(url: str, rows: pa.RecordBatch) -> None:
    import adbc_driver_postgresql.dbapi as adbc

    with adbc.connect(url) as conn, conn.cursor() as cur:
        cur.adbc_ingest("adbc_students", pa.Table.from_batches([rows]), mode="replace")
        conn.commit()


def delta(n: int, unused: list, seed: int) -> pa.RecordBatch:
    """n lines on rows no earlier delta touched (`unused`: ids in random order, taken from the end)."""
    touched = np.array([unused.pop() for _ in range(n // 4 * 3)])
    updates, deletes = touched[: n // 2], touched[n // 2 :]
    inserts = np.arange(10**9 + seed * n, 10**9 + seed * n + n // 4)
    changed = students(np.concatenate([updates, deletes, inserts]), seed)
    ops = ["update"] * len(updates) + ["delete"] * len(deletes) + ["insert"] * len(inserts)
    return changed.add_column(0, OP, pa.array(ops))


BAG = [c for c in COLUMNS if c.name != "id"]


def multiset_delta(n: int, rows: pa.RecordBatch, unused: list, seed: int) -> pa.RecordBatch:
    """n lines on a multiset of `rows` without their id: half deletes of rows it holds, half new rows."""
    gone = rows.take(pa.array([unused.pop() for _ in range(n // 2)])).select([c.name for c in BAG])
    new = students(np.arange(n - n // 2), seed).select([c.name for c in BAG])
    lines = pa.concat_tables([pa.Table.from_batches([gone]), pa.Table.from_batches([new])]).combine_chunks()
    ops = pa.array(["delete"] * gone.num_rows + ["insert"] * new.num_rows)
    counts = pa.array([1] * lines.num_rows, pa.int64())
    return lines.add_column(0, OP, ops).append_column(COUNT, counts).to_batches()[0]


def delete_insert(url: str, batch: pa.RecordBatch) -> None:
    names = ", ".join(c.name for c in COLUMNS)
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute(
            f"CREATE TEMPORARY TABLE d ON COMMIT DROP AS SELECT {names}, ''::text AS op FROM wh.students WITH NO DATA"
        )
        with conn.cursor().copy(f"COPY d ({names}, op) FROM STDIN (FORMAT csv)") as copy:
            for chunk in csv_chunks([batch], COLUMNS, [OP]):
                copy.write(chunk)
        conn.execute("ANALYZE d")
        conn.execute("DELETE FROM wh.students t USING d WHERE t.id = d.id AND d.op <> 'insert'")
        conn.execute(f"INSERT INTO wh.students ({names}) SELECT {names} FROM d WHERE op <> 'delete'")


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = students(np.arange(args.rows), 1)
    server = start_postgres(Path(tempfile.mkdtemp(prefix="pgdest")), dbname=None)
    try:
        url = server.create_database("dest").owner_url
        dest = PostgresDestination(url, "wh.students", "students")
        results: dict[str, list[float]] = {}
        unused = list(np.random.default_rng(0).permutation(args.rows))
        for r in range(args.repeat):
            version = r * 10
            load = [rows]
            record = results.setdefault
            record("(a) rebuild: CSV COPY", []).append(
                timed(dest.rebuild, f"load{r}", version, COLUMNS, ["id"], load, False, "load")
            )
            record("(b) binary COPY, psycopg write_row", []).append(timed(binary_copy, url, rows))
            record("(c) ADBC ingest (binary COPY in C)", []).append(timed(adbc_ingest, url, rows))
            for i, n in enumerate((1_000, 10_000, 100_000)):
                lines = [delta(n, unused, 10 * r + i + 1)]
                record(f"(d) apply {n:,} lines: ON CONFLICT DO UPDATE + DELETE", []).append(
                    timed(dest.apply, f"s{r}-{n}", version + i + 1, COLUMNS, ["id"], lines, False)
                )
                record(f"(e) apply {n:,} lines: DELETE + INSERT", []).append(
                    timed(delete_insert, url, delta(n, unused, 10 * r + i + 5))
                )
        bag = PostgresDestination(url, "wh.bag", "bag")
        for r in range(args.repeat):
            unused = list(np.random.default_rng(1).permutation(args.rows))
            record = results.setdefault
            load = [rows.select([c.name for c in BAG])]
            record("(f) multiset rebuild: CSV COPY", []).append(
                timed(bag.rebuild, f"load{r}", r * 10, BAG, [], load, True, "load")
            )
            for i, n in enumerate((1_000, 10_000)):
                lines = [multiset_delta(n, rows, unused, 10 * r + i)]
                record(f"(g) multiset apply {n:,} lines (half deletes by ctid)", []).append(
                    timed(bag.apply, f"m{r}-{n}", r * 10 + i + 1, BAG, [], lines, True)
                )
        print(f"{args.rows:,} rows, {dt.date.today()}\n")
        print("| way | median s | runs (s) |\n|---|---:|---|")
        for name, runs in sorted(results.items()):
            print(f"| {name} | {statistics.median(runs):.2f} | {', '.join(f'{x:.2f}' for x in runs)} |")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
