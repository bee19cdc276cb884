"""How much a fresh agent grows to answer one extract request of N grouped integer keys.

    python -m tests.benchmarks.agent_memory [--keys 1000000] [--code DIR] [--db PATH]

Builds (once) a SQLite table of N rows (id, v), starts `python -m remote_agent` from
`--code` (this checkout by default; point it at another checkout to compare versions),
sends every key in units of 8 with their true hashes, and prints the agent's peak RSS
(VmHWM) before and after the request and how long the answer took. The units are all
identical, so the answer is small and the growth is the key index and the scan.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa

from deltasieve_protocol import frames
from deltasieve_protocol.encoding import carry_limbs, limbs_to_bytes, row_hash_limbs
from deltasieve_protocol.models import ExtractControl, SiteSpec
from deltasieve_protocol.types import Column, LogicalType
from tests.benchmarks import machine
from workloads.harness import ROOT, free_port

UNIT_SIZE = 8
SEED = 42
COLUMNS = [Column("id", LogicalType("int")), Column("v", LogicalType("int"))]


def make_db(path: Path, n: int) -> None:
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        c.executemany("INSERT INTO t VALUES (?, ?)", ((i * 3, i * 7 % 1000) for i in range(n)))


def request(n: int) -> bytes:
    table = pa.table({"id": np.arange(n, dtype=np.int64) * 3, "v": np.arange(n, dtype=np.int64) * 7 % 1000})
    unit = np.arange(n, dtype=np.int64) // UNIT_SIZE
    sums = np.zeros((int(unit[-1]) + 1, 4), np.uint64)
    np.add.at(sums, unit, row_hash_limbs(table, COLUMNS, SEED, 128))
    units = pa.record_batch(
        {
            "__uid": np.arange(len(sums), dtype=np.int64),
            "__hash": pa.array(limbs_to_bytes(carry_limbs(sums)), pa.binary(16)),
        }
    )
    keys = pa.record_batch({"__uid": unit, "id": table.column("id").combine_chunks()})
    site = SiteSpec(
        sql="SELECT t.id, t.v FROM t", key=["id"], columns=[{"name": c.name, "type": str(c.type)} for c in COLUMNS]
    )
    return (
        frames.json_frame(frames.CONTROL, ExtractControl(site=site, seed=SEED).model_dump())
        + frames.arrow_frame(frames.UNITS_DELTA, frames.delta_encode(units))
        + frames.arrow_frame(frames.UNIT_KEYS_DELTA, frames.delta_encode(keys))
    )


def start_agent(db: Path, code: Path) -> tuple[subprocess.Popen, int]:
    """`python -m remote_agent` of checkout `code` on the SQLite file `db`, answering its
    health check, and its port."""
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "remote_agent", "--db-url", f"sqlite:///{db.resolve()}", "--port", str(port)],
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(code)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return agent, port


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--code", type=Path, default=ROOT, help="checkout whose remote_agent to run")
    p.add_argument("--db", type=Path, help="SQLite file to build or reuse (default: a temporary one)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "t.db"
        if not db.exists():
            make_db(db, args.keys)
        body = request(args.keys)
        agent, port = start_agent(db, args.code)
        try:
            idle = machine.peak_rss_kb(agent.pid)
            started = time.monotonic()
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/extract",
                content=body,
                headers={"Content-Type": frames.MEDIA_TYPE},
                timeout=600,
            )
            summary = [f.json() for f in frames.read_frames([answer.content]) if f.kind == frames.SUMMARY][0]
            took = time.monotonic() - started
            after = machine.peak_rss_kb(agent.pid)
        finally:
            agent.terminate()
            agent.wait()
    print(
        f"{args.code}: {args.keys:,} keys in {summary['units']:,} units ({summary['units_identical']:,} identical), request {len(body) / 2**20:.1f} MiB; "
        f"agent peak RSS {idle / 1024:.0f} MiB idle, {after / 1024:.0f} MiB after (+{(after - idle) / 1024:.0f} MiB); answered in {took:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
