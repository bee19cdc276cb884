"""Seconds of the agent's scan of N students rows, by phase, beside the engine's own fastest reads.

    python -m tests.benchmarks.read_phase [--rows 1000000] [--db PATH] [--engines sqlite postgres] [--chunk-rows 10000 ...]

Builds (once) the students workload's SQLite table of N rows (for `postgres`, also a
throwaway PostgreSQL server holding a copy), then times, in this one process and best of
three by wall time, every row of the site query read

- by each floor method of floors.py (the engine's own bulk reads, what a sync is set against);
- by the agent's scan in the answer's thread (`chunks.batches`), for each chunk size: its
  `read_s` and `convert_s`, and within them the driver's reads of the chunks (the adapter
  module's `read_table`) and their conversion to canonical columns (its `canonical`),
  counted by wrapping those two functions; the rest is the chunks' SQL, the key cursor's
  bookkeeping and the first chunk's read through the Python driver;
- by the agent's scan read ahead in a reader process (`readahead.batches`), drained without
  hashing: what the hand-over from the reader to the answer adds (`wait_s` is then the whole
  scan as the answer sees it).

CPU seconds are this process's (the reader process's are not in them). Run it from another
checkout (`cd ../other && python -m tests.benchmarks.read_phase --db PATH`) to compare
versions on the same rows; timings are noisy on a shared machine, so compare in one sitting.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

from remote_agent import chunks, readahead
from remote_agent.adapters import open_adapter, postgres_arrow, sqlite_arrow
from remote_agent.adapters.base import Adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import ValidatedQuery, validate_site_query
from remote_agent.timings import Timings
from tests.benchmarks import floors
from workloads.generators import STUDENTS
from workloads.students import COLUMNS, StudentsSource

#: Rows per batch the scan hands over (the sketch's default batch is about this).
BATCH_ROWS = 16_384
#: Each module whose `read_table` and `canonical` are the driver's read and the conversion.
ARROW_MODULES = {"sqlite": sqlite_arrow, "postgres": postgres_arrow}


def site_query(adapter: Adapter) -> ValidatedQuery:
    """Every column of the students table, keyed by student_id, as an agent validates it."""
    tables = {t.name: t for t in adapter.describe()}
    return validate_site_query(f"SELECT {', '.join(COLUMNS)} FROM students", ["student_id"], tables, adapter.dialect)


def best_of_three(run: Callable[[], dict[str, float]]) -> dict[str, float]:
    """The run of three with the least wall time: its `wall` and `cpu` seconds and what it reported."""
    runs = []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        parts = run()
        runs.append({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, **parts})
    return min(runs, key=lambda r: r["wall"])


@contextlib.contextmanager
def counted(module: ModuleType, names: tuple[str, ...]) -> Iterator[dict[str, float]]:
    """The seconds spent in each of `module`'s functions `names` while the block runs."""
    seconds = dict.fromkeys(names, 0.0)
    originals = {name: getattr(module, name) for name in names}

    def timed(name: str, f: Callable) -> Callable:
        @functools.wraps(f)
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - started

        return call

    for name, f in originals.items():
        setattr(module, name, timed(name, f))
    try:
        yield seconds
    finally:
        for name, f in originals.items():
            setattr(module, name, f)


def in_process(adapter: Adapter, query: ValidatedQuery, chunk_rows: int) -> dict[str, float]:
    """The agent's scan in this thread: its timings, and the driver's and the conversion's share."""
    converter = RowConverter(adapter, query.columns, query.where())
    timings = Timings()
    with counted(ARROW_MODULES[adapter.dialect], ("read_table", "canonical")) as parts, adapter.session() as session:
        for _ in chunks.batches(
            adapter, session, query, converter, chunk_rows=chunk_rows, batch_rows=BATCH_ROWS, timings=timings
        ):
            pass
    return {
        "read_s": timings.seconds["read_s"],
        "convert_s": timings.seconds["convert_s"],
        "driver": parts["read_table"],
        "canonical": parts["canonical"],
    }


def read_ahead(adapter: Adapter, query: ValidatedQuery, chunk_rows: int) -> dict[str, float]:
    """The agent's scan in a reader process, its batches drained here."""
    converter = RowConverter(adapter, query.columns, query.where())
    timings = Timings()
    scan = ScanSettings(chunk_rows, read_ahead=True)
    for _ in readahead.batches(adapter, query, converter, scan, batch_rows=BATCH_ROWS, timings=timings):
        pass
    return {name: timings.seconds[name] for name in ("read_s", "convert_s", "wait_s")}


def floor_read(read: Callable[[str, str], None], source: str, sql: str) -> Callable[[], dict[str, float]]:
    """One floor method's read of `sql` at `source`, with no parts to report."""

    def run() -> dict[str, float]:
        read(source, sql)
        return {}

    return run


def report(engine: str, adapter: Adapter, source: str, chunk_sizes: list[int]) -> None:
    query = site_query(adapter)
    runs = {name: floor_read(read, source, query.sql) for name, read in floors.METHODS[engine].items()}
    for size in chunk_sizes:
        runs[f"agent's scan, chunks of {size:,}"] = functools.partial(in_process, adapter, query, size)
        runs[f"agent's scan read ahead, chunks of {size:,}"] = functools.partial(read_ahead, adapter, query, size)
    print(f"\n{engine}: seconds, best of 3 by wall time")
    for name, run in runs.items():
        measured = best_of_three(run)
        parts = " · ".join(f"{k} {v:.2f}" for k, v in measured.items() if k not in ("wall", "cpu"))
        print(f"{name:48s} wall {measured['wall']:6.2f}  cpu {measured['cpu']:6.2f}  {parts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path, help="the SQLite file (built if absent; default: a temporary one)")
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=sorted(ARROW_MODULES),
        default=["sqlite"],
        help="the sources to read: the SQLite file, a copy on a throwaway PostgreSQL server",
    )
    parser.add_argument("--chunk-rows", type=int, nargs="+", default=[10_000], help="chunk sizes to scan with")
    args = parser.parse_args()
    readahead.start()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "students.db"
        if not db.exists():
            StudentsSource(db).create(args.rows)
        if "sqlite" in args.engines:
            report("sqlite", open_adapter(f"sqlite:///{db}", statement_timeout_s=3600), str(db), args.chunk_rows)
        if "postgres" in args.engines:
            from tests.benchmarks.pgsource import PostgresSource

            source = PostgresSource(STUDENTS, db, Path(tmp))
            try:
                source.load()
                url = source.reader_url
                report("postgres", open_adapter(url, statement_timeout_s=3600), url, args.chunk_rows)
            finally:
                source.stop()


if __name__ == "__main__":
    main()
