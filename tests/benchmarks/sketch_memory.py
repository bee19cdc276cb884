"""How much a fresh agent grows to answer a steady sketch exchange on students: the probe
(which reads the site query into the agent's table), then the main stage (the peel, the
lookups of the differing keys, the updated rows' digests).

    python -m tests.benchmarks.sketch_memory [--rows 1000000] [--updates 100000]
        [--inserts 50000] [--deletes 10000] [--width W] [--wider 4] [--db PATH] [--code DIR]

Builds (once, beside --db) a students SQLite table of --rows rows and a copy of it with the
change applied, computes the warehouse's tables from the unchanged rows as the service
would, starts `python -m remote_agent` from --code (this checkout by default) on the
changed copy, and prints the agent process's RSS idle and its peak during each stage
(sampled every 50 ms) with the stage's seconds. The default change is a steady sync's at
10M rows (1 % updated, 0.5 % inserted, 0.1 % deleted) put on 1M rows: the exchange's own
memory at the 10M sync's size, without the 10M scan. The first sync after a 10M-row load
sends a wider main stage, sized from the prior: `--width 322560 --wider 2`.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa

from deltasieve_protocol import frames, iblt_bytes
from deltasieve_protocol.fingerprints import key_fingerprints, row_fingerprints, sketch_seeds
from deltasieve_protocol.iblt import Iblt
from deltasieve_protocol.models import SiteSpec, SketchControl
from deltasieve_protocol.types import Column
from remote_agent import chunks
from remote_agent.adapters.rows import RowConverter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.sitequery import validate_site_query
from remote_agent.timings import Timings
from tests.benchmarks import machine
from tests.benchmarks.agent_memory import start_agent
from workloads.harness import ROOT
from workloads.students import COLUMNS, StudentsSource, make_student

SECRET = 987_654_321
SQL = f"SELECT {', '.join(f's.{c}' for c in COLUMNS)} FROM students s"
#: Cells per differing pair of the main stage, and how much wider the agent's table is asked
#: to be (a wider stage could follow without a second read), as the service sizes them.
CELLS_PER_PAIR = 1.4
WIDER = 4


def changed_copy(source: Path, target: Path, updates: int, inserts: int, deletes: int) -> None:
    """`target`: `source` with `updates` rows given a new phone and address, `deletes` rows gone and `inserts` new."""
    shutil.copy(source, target)
    rng = random.Random(3)
    with sqlite3.connect(target) as c:
        ids = [r[0] for r in c.execute("SELECT student_id FROM students")]
        picked = rng.sample(ids, updates + deletes)
        c.executemany(
            "UPDATE students SET phone = ?, address = ? WHERE student_id = ?",
            [(f"+1 555 {i}", f"{i} Main Street", i) for i in picked[:updates]],
        )
        c.executemany("DELETE FROM students WHERE student_id = ?", [(i,) for i in picked[updates:]])
        top = max(ids)
        c.executemany(
            f"INSERT INTO students VALUES ({','.join('?' * len(COLUMNS))})",
            [make_student(rng, top + 1 + i) for i in range(inserts)],
        )


def warehouse_pairs(db: Path) -> tuple[list[Column], object, object]:
    """The site query's columns and the (key fingerprint, row hash) pairs of every row of `db`."""
    adapter = SqliteAdapter(f"sqlite:///{db}", statement_timeout_s=600, arrow_reads=True)
    query = validate_site_query(SQL, ["student_id"], {t.name: t for t in adapter.describe()}, "sqlite")
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        read = chunks.batches(
            adapter, session, query, converter, chunk_rows=100_000, batch_rows=100_000, timings=Timings()
        )
        rows = pa.Table.from_batches(list(read), converter.schema)
    columns = [Column(c.name, c.type) for c in query.columns]
    key_seed, row_seed = sketch_seeds(SECRET)
    return columns, key_fingerprints(rows, columns[:1], key_seed), row_fingerprints(rows, columns, row_seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--updates", type=int, default=100_000)
    p.add_argument("--inserts", type=int, default=50_000)
    p.add_argument("--deletes", type=int, default=10_000)
    p.add_argument("--width", type=int, help="cells per sub-table of the main stage (default: sized for the change)")
    p.add_argument("--wider", type=int, default=WIDER, help="the agent's table, in main stage widths")
    p.add_argument("--db", type=Path, default=ROOT / "tests/benchmarks/work/sketch-memory/students.db")
    p.add_argument("--code", type=Path, default=ROOT, help="checkout whose remote_agent to run")
    args = p.parse_args(argv)
    if not args.db.exists():
        StudentsSource(args.db).create(args.rows)
    changed = args.db.with_name(f"changed-{args.updates}-{args.inserts}-{args.deletes}.db")
    if not changed.exists():
        changed_copy(args.db, changed, args.updates, args.inserts, args.deletes)
    columns, keys, hashes = warehouse_pairs(args.db)
    width = args.width or -(-int((2 * args.updates + args.inserts + args.deletes) * CELLS_PER_PAIR) // 3)
    probe, main_stage = Iblt(3, 3, SECRET), Iblt(3 * width, 3, SECRET)
    probe.add(keys, hashes)
    main_stage.add(keys, hashes)
    site = SiteSpec(sql=SQL, key=["student_id"], columns=[{"name": c.name, "type": str(c.type)} for c in columns])

    def body(table: Iblt, session: str | None) -> bytes:
        control = SketchControl(site=site, seed=SECRET, width=args.wider * width, session=session)
        packed = iblt_bytes.to_bytes(table.to_compact())
        return frames.json_frame(frames.CONTROL, control.model_dump()) + frames.frame(frames.SKETCH_CELLS, packed)

    agent, port = start_agent(changed, args.code)
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(machine.rss_kb(agent.pid) or 0)
            time.sleep(0.05)

    try:
        print(f"agent idle: {machine.rss_kb(agent.pid) / 1024:.0f} MiB RSS")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        session = None
        for stage, table in (("probe", probe), ("main stage", main_stage)):
            first, started = len(samples), time.monotonic()
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/sketch",
                content=body(table, session),
                headers={"Content-Type": frames.MEDIA_TYPE},
                timeout=600,
            )
            answer.raise_for_status()
            summary = [f.json() for f in frames.read_frames([answer.content]) if f.kind == frames.SUMMARY][0]
            session = summary.get("session")
            peak = max(samples[first:], default=0)
            print(
                f"{stage}: {time.monotonic() - started:.1f} s, complete {summary['complete']}, "
                f"rows sent {summary.get('rows_sent', 0):,}, updated {summary.get('updated_rows', 0):,}; "
                f"peak {peak / 1024:.0f} MiB RSS, after {machine.rss_kb(agent.pid) / 1024:.0f} MiB"
            )
        print(f"agent peak RSS (VmHWM): {machine.peak_rss_kb(agent.pid) / 1024:.0f} MiB")
    finally:
        done.set()
        agent.terminate()
        agent.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
