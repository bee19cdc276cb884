"""Small syncs' service time (#52): a sync of a table of 100 to 100,000 rows with nothing changed
and with 1 % of its rows changed, on the in-process path beside the Spark path, and the size
at which the Spark path catches up: where SERVICE_SMALL_SYNC_ROWS is to be set.

    python -m tests.benchmarks.small_path --sizes 100,1000,10000,100000 --syncs 9

One SQLite file holds a table per size and one agent serves it. The service runs twice on a
warehouse of its own: with SERVICE_SMALL_SYNC_ROWS=0 (every sync on Spark) and with it above
every size (every sync in process). Each run mirrors each table, loads it, syncs it once
unmeasured, then `--syncs` times with no change and `--syncs` times after changing 1 % of its
rows (distinct keys, one transaction). Each sync is POST /v1/views/{view}/syncs?wait=true on
loopback, timed at the client from request to answer; the sync record's own wall time, its
phases and (where the service reports it) its executor are kept beside it. A cell is the
median of its syncs. A service that predates the setting takes the Spark path both times:
the `executor` column says which path each run took, when the service names it.
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import sqlite3
import statistics
import time
from pathlib import Path

from tests.benchmarks import machine
from workloads.harness import Api, start_agent, start_service

WORK = Path(__file__).resolve().parent / "work" / "small-path"
OUT = Path(__file__).resolve().parent / "results" / "small-path.json"
SIZES = (100, 1_000, 10_000, 100_000)
#: The two runs: the path asked for, and SERVICE_SMALL_SYNC_ROWS that asks for it.
PATHS = {"spark": 0, "in-process": 10**9}
#: Share of a table's rows one change touches.
CHANGED = 0.01
CHANGES = ("none", "1%")


def make_tables(path: Path, sizes, seed: int) -> None:
    """One table per size, `t<size>`, of an integer key and five columns of common types."""
    rng = random.Random(seed)
    with sqlite3.connect(path) as db:
        for n in sizes:
            db.execute(
                f"CREATE TABLE t{n} (id INTEGER PRIMARY KEY, code TEXT NOT NULL, name TEXT, "
                "qty INTEGER NOT NULL, price REAL, updated_at TEXT)"
            )
            db.executemany(
                f"INSERT INTO t{n} VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (
                        i,
                        f"C{i:07d}",
                        f"item {rng.randrange(10**6)}",
                        rng.randrange(1000),
                        rng.random() * 100,
                        "2026-01-01",
                    )
                    for i in range(n)
                ),
            )


def change(path: Path, size: int, rng: random.Random) -> int:
    """Update 1 % of a table's rows (at least one), distinct keys in one transaction; how many."""
    keys = rng.sample(range(size), max(1, round(size * CHANGED)))
    with sqlite3.connect(path) as db:
        db.executemany(
            f"UPDATE t{size} SET qty = qty + 1, updated_at = datetime('now') WHERE id = ?", ((k,) for k in keys)
        )
    return len(keys)


def timed_sync(api: Api, view: str) -> dict:
    """One sync, waited for; the client's milliseconds and the record's own figures."""
    started = time.perf_counter()
    record = api.sync(view)
    client_ms = (time.perf_counter() - started) * 1000
    m = record.get("metrics") or {}
    if record.get("status") != "succeeded":
        raise RuntimeError(f"sync of {view} ended {record.get('status')}: {record.get('error')}")
    return {
        "client_ms": round(client_ms, 2),
        "sync_ms": None if m.get("wall_seconds") is None else round(m["wall_seconds"] * 1000, 2),
        "phases_ms": {k: round(v * 1000, 2) for k, v in (m.get("phases") or {}).items() if isinstance(v, (int, float))},
        "executor": m.get("executor"),
        "spark_jobs": m.get("spark_jobs"),
        "rows_updated": m.get("rows_updated"),
    }


def cell(path: str, size: int, change_: str, syncs: list[dict], changed: int) -> dict:
    """The median of one cell's syncs, with each phase's median and the executors seen.

    >>> s = [{"client_ms": c, "sync_ms": c - 5, "phases_ms": {"commit": 1.0}, "executor": "arrow", "rows_updated": 10}
    ...      for c in (30.0, 20.0, 40.0)]
    >>> c = cell("in-process", 1000, "1%", s, 10)
    >>> c["client_ms"], c["sync_ms"], c["phases_ms"], c["executor"], c["exact_counts"]
    (30.0, 25.0, {'commit': 1.0}, 'arrow', True)
    """
    phases = sorted({p for s in syncs for p in s["phases_ms"]})
    executors = sorted({s["executor"] for s in syncs if s["executor"]})
    timed = [s["sync_ms"] for s in syncs if s["sync_ms"] is not None]
    jobs = [s["spark_jobs"] for s in syncs if s.get("spark_jobs") is not None]
    return {
        "path": path,
        "rows": size,
        "change": change_,
        "syncs": len(syncs),
        "client_ms": round(statistics.median(s["client_ms"] for s in syncs), 2),
        "client_ms_min": min(s["client_ms"] for s in syncs),
        "client_ms_max": max(s["client_ms"] for s in syncs),
        "sync_ms": round(statistics.median(timed), 2) if timed else None,
        "phases_ms": {p: round(statistics.median(s["phases_ms"].get(p, 0.0) for s in syncs), 2) for p in phases},
        "executor": "+".join(executors) or None,
        "spark_jobs": statistics.median(jobs) if jobs else None,
        "exact_counts": all(s["rows_updated"] == changed for s in syncs),
    }


def run_path(args: argparse.Namespace, path: str, db: Path, log) -> list[dict]:
    """Every size and change on one service started with the path's SERVICE_SMALL_SYNC_ROWS."""
    work = args.work / path
    work.mkdir(parents=True)
    rng = random.Random(args.seed)
    token = secrets.token_hex(16)
    agent = start_agent(f"sqlite:///{db}", work, token=token)
    service = start_service(work / "warehouse", work, env={"SERVICE_SMALL_SYNC_ROWS": str(PATHS[path])})
    api = Api(service.url, timeout=3600)
    cells = []
    try:
        api.add_source("small", agent.url, token)
        r = api.http.post("/v1/sources/small/mirror", json={"tables": [f"t{n}" for n in args.sizes]})
        r.raise_for_status()
        for size in args.sizes:
            view = f"small_t{size}"
            api.sync(view)  # the load
            timed_sync(api, view)  # once unmeasured: the first no-change sync warms its code up
            quiet = [timed_sync(api, view) for _ in range(args.syncs)]
            cells.append(cell(path, size, "none", quiet, 0))
            changed, busy = 0, []
            for _ in range(args.syncs):
                changed = change(db, size, rng)
                busy.append(timed_sync(api, view))
            cells.append(cell(path, size, "1%", busy, changed))
            for c in cells[-2:]:
                log(
                    f"[{path}] {size:>7,} rows, change {c['change']:>4}: {c['client_ms']:8.1f} ms at the client, "
                    f"{c['sync_ms']} ms in the sync, executor {c['executor']}, phases {c['phases_ms']}"
                )
    finally:
        api.close()
        service.stop()
        agent.stop()
    return cells


def crossover(cells: list[dict], change_: str) -> dict:
    """The smallest size at which the Spark path's median is no slower than the in-process path's;
    not determined unless the runs' syncs named different executors (a service that predates
    the in-process path syncs both runs on Spark).

    >>> cs = [{"path": p, "rows": n, "change": "1%", "client_ms": ms, "executor": e}
    ...       for p, n, ms, e in [("spark", 100, 200, "spark"), ("in-process", 100, 20, "arrow"),
    ...                           ("spark", 10**5, 400, "spark"), ("in-process", 10**5, 500, "arrow")]]
    >>> crossover(cs, "1%")
    {'rows': 100000, 'below': 100, 'note': 'the Spark path is no slower from 100,000 rows'}
    >>> crossover(cs[:2], "1%")["rows"] is None
    True
    >>> crossover([{**c, "executor": None} for c in cs], "1%")["note"]
    'not determined: the two runs did not name different executors'
    """
    mine = [c for c in cells if c["change"] == change_]
    by = {(c["path"], c["rows"]): c for c in mine}
    sizes = sorted({c["rows"] for c in mine})
    below = None
    for n in sizes:
        spark, inproc = by.get(("spark", n)), by.get(("in-process", n))
        if spark is None or inproc is None:
            continue
        if not spark["executor"] or not inproc["executor"] or spark["executor"] == inproc["executor"]:
            return {
                "rows": None,
                "below": None,
                "note": "not determined: the two runs did not name different executors",
            }
        if spark["client_ms"] <= inproc["client_ms"]:
            return {"rows": n, "below": below, "note": f"the Spark path is no slower from {n:,} rows"}
        below = n
    return {
        "rows": None,
        "below": below,
        "note": "the in-process path is faster at every size measured"
        + (f" (up to {below:,} rows): the threshold can be set above it" if below else ""),
    }


def summarize(cells: list[dict]) -> dict:
    """Per size: each path's medians at the client, no change and 1 % changed, and the executor it took."""
    out: dict = {}
    for c in cells:
        row = out.setdefault(f"{c['rows']:,} rows", {})
        row[f"{c['path']} · {c['change']} (ms)"] = c["client_ms"]
        row[f"{c['path']} executor"] = c["executor"]
    return out


def markdown(out: dict) -> str:
    lines = [
        "# Small syncs: service time per sync, the in-process path beside the Spark path",
        "",
        f"{out['date']}, commit {out['commit']}. Median of {out['syncs']} syncs a cell, POST with wait on loopback timed "
        "at the client (ms); the sync's own wall time beside it.",
        "",
        "| rows | change | path | executor | client ms | sync ms | min–max |",
        "|---:|---|---|---|---:|---:|---|",
    ]
    for c in out["cells"]:
        lines.append(
            f"| {c['rows']:,} | {c['change']} | {c['path']} | {c['executor'] or '—'} | {c['client_ms']:.1f} | "
            f"{c['sync_ms'] if c['sync_ms'] is not None else '—'} | {c['client_ms_min']:.0f}–{c['client_ms_max']:.0f} |"
        )
    lines += ["", *(f"- {f}" for f in out["findings"])]
    return "\n".join(lines) + "\n"


def findings(cells: list[dict]) -> list[str]:
    out = []
    for change_ in CHANGES:
        x = crossover(cells, change_)
        out.append(f"change {change_}: {x['note']}.")
    paths = {c["path"]: c["executor"] for c in cells}
    if paths.get("spark") and paths.get("spark") == paths.get("in-process"):
        out.append(f"both runs took the {paths['spark']} executor: the service does not choose a path by size here.")
    elif not any(paths.values()):
        out.append("the service's sync metrics name no executor: both runs may have taken the same path.")
    if not all(c["exact_counts"] for c in cells):
        out.append("some sync counted other updated rows than the change made (see exact_counts).")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.small_path", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=list(SIZES), help="rows of each table"
    )
    parser.add_argument("--syncs", type=int, default=9, help="measured syncs per cell (their median is the cell's)")
    parser.add_argument("--paths", default=",".join(PATHS), help="the runs: spark, in-process or both")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    db = args.work / "small.db"
    make_tables(db, args.sizes, args.seed)
    cells = []
    for path in args.paths.split(","):
        cells += run_path(args, path, db, print)
    out = {
        "date": machine.describe()["date"],
        "machine": machine.describe(),
        "sizes": args.sizes,
        "syncs": args.syncs,
        "settings": {p: {"SERVICE_SMALL_SYNC_ROWS": PATHS[p]} for p in args.paths.split(",")},
        "crossover": {c: crossover(cells, c) for c in CHANGES},
        "summary": summarize(cells),
        "findings": findings(cells),
        "cells": cells,
    }
    machine.save(out, args, "tests.benchmarks.small_path", markdown)
    shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
