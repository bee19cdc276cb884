"""CPU seconds of each piece of the agent's hashing phase (`hash_s`) over N students rows.

    python -m tests.benchmarks.hash_phase [--rows 1000000] [--db PATH]

Builds (once) the students workload's SQLite table of N rows, reads it through the agent's
own adapter and converter into the batches a scan hands over, then times, best of three,
what the sketch strategy does to them (row encoding, xxh3, fingerprints, folding into the
IBLT) and the row hashes the group-hash and range-checksum strategies take; last, the whole
of what the sketch scan times as `hash_s` (fingerprints and fold, batch by batch as it folds).
The row encoding, the fingerprints, the fold and the whole are timed twice: compiled
(row_kernel, xxh3, iblt_fold), and by the reference implementation they are tested against
(NumPy and Arrow, the xxhash package row by row, grouping by cell); the compiled functions are
called once before, so that no compile time is counted. Run it from
another checkout (`cd ../other && python -m tests.benchmarks.hash_phase --db PATH`) to
compare versions on the same rows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterable
from itertools import repeat
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

from deltasieve_protocol.encoding import encode_rows, encoded_rows, reference_encoded_rows, row_bytes, row_hash_limbs
from deltasieve_protocol.fingerprints import (
    key_fingerprints,
    reference_row_fingerprints,
    row_fingerprints,
    sketch_seeds,
)
from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.types import Column
from deltasieve_protocol.xxh3 import xxh3_64_slices
from remote_agent import chunks
from remote_agent.adapters import open_adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.sitequery import validate_site_query
from remote_agent.strategies.checks import key_columns
from remote_agent.timings import Timings
from workloads.students import COLUMNS, StudentsSource

SECRET = 12345
#: Cells per sub-table of the IBLT folded into (the 10M benchmark's agent built 1.29M cells).
WIDTH = 430_096
#: Rows folded into the IBLT at once, as the sketch scan groups them.
GROUP_ROWS = 131_072


def scanned_batches(db: Path, rows: int) -> tuple[list[pa.RecordBatch], list[Column], list[Column]]:
    """The batches an agent's scan of the students table hands over, with its columns and key."""
    if not db.exists():
        StudentsSource(db).create(rows)
    adapter = open_adapter(f"sqlite:///{db}", statement_timeout_s=3600)
    tables = {t.name: t for t in adapter.describe()}
    query = validate_site_query(f"SELECT {', '.join(COLUMNS)} FROM students", ["student_id"], tables, adapter.dialect)
    converter = RowConverter(adapter, query.columns, query.where())
    with adapter.session() as session:
        batches = list(
            chunks.batches(adapter, session, query, converter, chunk_rows=50_000, batch_rows=16_384, timings=Timings())
        )
    return batches, [Column(c.name, c.type) for c in query.columns], key_columns(query)


def best_of_three(run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


def _each(f: Callable, items: Iterable) -> Callable[[], None]:
    def run() -> None:
        for item in items:  # each result dropped, as a scan drops it
            f(item)

    return run


def _fold(pairs: Iterable[tuple[np.ndarray, np.ndarray]], group: int, add: Callable = Iblt.add) -> None:
    """Fold the pairs into a compact table `group` rows at once, as the sketch scan does."""
    table = Iblt(WIDTH * 3, 3, SECRET, compact=True)
    waiting, size = [], 0
    for keys, hashes in pairs:
        waiting.append((keys, hashes))
        size += len(keys)
        if size >= group:
            add(table, *(np.concatenate(p) for p in zip(*waiting)), normalize=False)
            waiting, size = [], 0
    if waiting:
        add(table, *(np.concatenate(p) for p in zip(*waiting)), normalize=False)
    table.normalize()


def _folding(pairs: list[tuple[np.ndarray, np.ndarray]], group: int, add: Callable = Iblt.add) -> Callable[[], None]:
    return lambda: _fold(pairs, group, add)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path, help="the SQLite file (built if absent; default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        batches, columns, key = scanned_batches(args.db or Path(tmp) / "students.db", args.rows)
    rows = sum(b.num_rows for b in batches)
    key_seed, row_seed = sketch_seeds(SECRET)
    encoded = [encode_rows(b, columns) for b in batches]
    pairs = [(key_fingerprints(b, key, key_seed), row_fingerprints(b, columns, row_seed)) for b in batches]
    _fold(pairs[:1], 1)  # the fold loaded (or compiled) before it is timed
    pieces = {
        "encoded_rows, reference": _each(lambda b: reference_encoded_rows(b, columns), batches),
        "encoded_rows (compiled)": _each(lambda b: encoded_rows(b, columns), batches),
        "encode_rows (compiled, to_pylist)": _each(lambda b: encode_rows(b, columns), batches),
        "xxh3-64 of the encoded rows": _each(
            lambda e: b"".join(map(xxhash.xxh3_64_digest, e, repeat(row_seed))), encoded
        ),
        "xxh3-64 of the encoded rows (compiled)": _each(
            lambda e: xxh3_64_slices(e.offsets, e.data, row_seed), [row_bytes(b, columns) for b in batches]
        ),
        "key_fingerprints": _each(lambda b: key_fingerprints(b, key, key_seed), batches),
        "row_fingerprints, reference": _each(lambda b: reference_row_fingerprints(b, columns, row_seed), batches),
        "row_fingerprints (compiled)": _each(lambda b: row_fingerprints(b, columns, row_seed), batches),
        "Iblt.reference_add, batch by batch": _folding(pairs, 1, Iblt.reference_add),
        f"Iblt.reference_add, {GROUP_ROWS:,} at once": _folding(pairs, GROUP_ROWS, Iblt.reference_add),
        "Iblt.add (compiled), batch by batch": _folding(pairs, 1),
        f"Iblt.add (compiled), {GROUP_ROWS:,} at once": _folding(pairs, GROUP_ROWS),
        "row_hash_limbs (128 bits)": _each(lambda b: row_hash_limbs(b, columns, row_seed, 128), batches),
        "sketch scan's hash_s, reference": lambda: _fold(
            ((key_fingerprints(b, key, key_seed), reference_row_fingerprints(b, columns, row_seed)) for b in batches),
            1,
            Iblt.reference_add,
        ),
        "sketch scan's hash_s (compiled)": lambda: _fold(
            ((key_fingerprints(b, key, key_seed), row_fingerprints(b, columns, row_seed)) for b in batches),
            1,
        ),
    }
    print(f"{rows:,} students rows in {len(batches)} batches; CPU seconds, best of 3")
    for name, run in pieces.items():
        print(f"{name:40s} {best_of_three(run):7.3f}")


if __name__ == "__main__":
    main()
