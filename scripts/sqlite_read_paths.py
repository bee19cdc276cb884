"""Seconds to read the students site query from SQLite into canonical Arrow batches: sqlite3 against ADBC.

Both paths read as the agent does (chunks.batches: keyset chunks of 50,000 rows ordered by
the key, each its own read transaction); the two results are checked equal; beside them
the floor of tests/benchmarks/floors.py (one ADBC statement of the whole query, no chunks,
no canonical columns). 1M students rows, 2 shared cores under heavy load from other jobs
(load average 28-58: several times a quiet machine's seconds), the paths interleaved in one
process, at the commit that made the Arrow path the default:

    python scripts/sqlite_read_paths.py students-1m.db --repeat 2

| run | sqlite3 + RowConverter (before) | ADBC, sqlite_arrow.py (after) | floor: ADBC whole query |
|-----|--------------------------------:|------------------------------:|------------------------:|
| 1   | 52.6 (read 32.7, convert 19.5)   | 18.5 (read 17.4, convert 1.0) |                         |
| 2   | 47.1 (read 25.8, convert 21.0)   | 18.0 (read 16.1, convert 1.9) |                         |
| 3   | 36.2                             | 21.3                          | 8.1 (11.8, 8.1)         |

The Arrow path's convert is its first chunk, read through sqlite3 under the statement
timeout before the driver, which cannot interrupt a statement, takes the others.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote_agent import chunks  # noqa: E402
from remote_agent.adapters.rows import RowConverter  # noqa: E402
from remote_agent.adapters.sqlite import SqliteAdapter  # noqa: E402
from remote_agent.sitequery import validate_site_query  # noqa: E402
from remote_agent.timings import Timings  # noqa: E402
from tests.benchmarks.floors import _adbc_sqlite  # noqa: E402
from workloads.students import COLUMNS  # noqa: E402

SQL = f"SELECT {', '.join(f's.{c}' for c in COLUMNS)} FROM students s"


def read(path: str, *, arrow: bool) -> tuple[pa.Table, dict]:
    """The site query through the agent's chunked scan, and its timings (wall, read, convert)."""
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=60, arrow_reads=arrow)
    query = validate_site_query(SQL, ["student_id"], {t.name: t for t in adapter.describe()}, "sqlite")
    converter = RowConverter(adapter, query.columns)
    timings = Timings()
    started = time.perf_counter()
    with adapter.session() as session:
        scanned = chunks.batches(
            adapter, session, query, converter, chunk_rows=50_000, batch_rows=50_000, timings=timings
        )
        table = pa.Table.from_batches(list(scanned), converter.schema)
    return table, {"wall_s": time.perf_counter() - started, **timings.to_json()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", help="a students SQLite file (workloads.students.StudentsSource.create)")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    for run in range(args.repeat):
        before, seconds_before = read(args.db, arrow=False)
        after, seconds_after = read(args.db, arrow=True)
        assert after.equals(before), "the Arrow path read other values"
        started = time.perf_counter()
        _adbc_sqlite(args.db, SQL)
        floor = time.perf_counter() - started
        print(f"run {run + 1}: sqlite3 {seconds_before}  adbc {seconds_after}  floor {floor:.2f} s", flush=True)


if __name__ == "__main__":
    main()
