"""Small syncs' service time (#52): a sync of a table of 100 to 100,000 rows with nothing changed,
with nothing of it changed but another table of its file written, and with 1 % of its rows
changed, on the in-process path beside the Spark path, and the size at which the Spark path
catches up: where SERVICE_SMALL_SYNC_ROWS is to be set.

    python -m tests.benchmarks.small_path --sizes 100,1000,10000,100000 --syncs 9

One SQLite file holds a table per size and one agent serves it. The service runs twice on a
warehouse of its own: with SERVICE_SMALL_SYNC_ROWS=0 (every sync on Spark) and with it above
every size (every sync in process). Each run mirrors each table, loads it, leaves the load's
background sketch build SETTLE_S seconds to end, syncs it WARM_UP_SYNCS times unmeasured, then `--syncs` times with no change (the change token ends those), `--syncs` times
after a write to another table of the same file ("none, file written": SQLite's token is the
file's, so the sync compares the table and finds nothing, as most syncs of a many-table
source written all day do), `--syncs` times after changing 1 % of its rows (distinct keys,
one transaction) and `--syncs` times with nothing changed after those ("none, after 1%": the
statistics expect changes, so the change token rides on the sketch's first stage, which it
ends unread). Each sync is POST /v1/views/{view}/syncs?wait=true on loopback, timed at
the client from request to answer; the sync record's own wall time, its phases and its
site's, its round trips, the strategy that ran (auto's choice, and a fallback after it) and
(where the service reports it) its executor are kept beside it, and the CPU time the service's
process used from request to answer (every thread of it, read from /proc: unlike the client's
wall time it holds still while other programs take the cores). A cell is the median of its
syncs; its CPU time is the mean, the clock's ticks being 10 ms. A service that predates the setting takes the Spark path both times: the `executor`
column says which path each run took, when the service names it.
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
#: The changes each table syncs after: none (the change token ends the sync), a write to
#: another table of its file (the token cannot: a compare that finds nothing), 1 % of its
#: rows, none again after those (the token, riding on the first request where the
#: statistics expect changes, ends the sync).
FILE_WRITTEN = "none, file written"
AFTER_CHANGES = "none, after 1%"
CHANGES = ("none", FILE_WRITTEN, "1%", AFTER_CHANGES)
#: Seconds left after a load for its background work (the sketch table's build) to end.
SETTLE_S = 3.0
#: Unmeasured no-change syncs before a size's cells: one left the first size's cell at twice
#: its steady time on a fresh service.
WARM_UP_SYNCS = 3
#: The table written for FILE_WRITTEN, mirrored by no view.
OTHER_TABLE = "other_writes"


def make_tables(path: Path, sizes, seed: int) -> None:
    """One table per size, `t<size>`, of an integer key and five columns of common types."""
    rng = random.Random(seed)
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE {OTHER_TABLE} (id INTEGER PRIMARY KEY, at TEXT NOT NULL)")
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


def write_other(path: Path) -> None:
    """Write a row to the table no view reads: the file, so SQLite's change token, changes."""
    with sqlite3.connect(path) as db:
        db.execute(f"INSERT INTO {OTHER_TABLE} (at) VALUES (datetime('now'))")


def strategy_of(metrics: dict) -> str | None:
    """What ran at the view's sites: auto's choice (else the view's strategy), and a fallback
    after an arrow, or "change token" where the token found the site unchanged (no strategy
    ran); sites that differ joined with "+".

    >>> strategy_of({"strategy": "auto", "sites": [{"chosen": "sketch", "fallback": "full_ship"}]})
    'sketch>full_ship'
    >>> strategy_of({"strategy": "tuple_hash", "sites": [{}]}), strategy_of({})
    ('tuple_hash', None)
    >>> strategy_of({"strategy": "auto", "sites": [{"unchanged_by_token": True}]})
    'change token'
    """
    ran = []
    for site in metrics.get("sites") or [{}]:
        name = "change token" if site.get("unchanged_by_token") else site.get("chosen") or metrics.get("strategy")
        if name is not None and site.get("fallback"):
            name = f"{name}>{site['fallback']}"
        if name is not None and name not in ran:
            ran.append(name)
    return "+".join(ran) or None


def timed_sync(api: Api, view: str, service_pid: int | None = None) -> dict:
    """One sync, waited for; the client's milliseconds, the service process's CPU milliseconds
    (None without `service_pid` or /proc) and the record's own figures."""
    cpu_before = machine.cpu_seconds(service_pid) if service_pid else None
    started = time.perf_counter()
    record = api.sync(view)
    client_ms = (time.perf_counter() - started) * 1000
    cpu_after = machine.cpu_seconds(service_pid) if service_pid else None
    m = record.get("metrics") or {}
    if record.get("status") != "succeeded":
        raise RuntimeError(f"sync of {view} ended {record.get('status')}: {record.get('error')}")
    sites = m.get("sites") or []
    return {
        "client_ms": round(client_ms, 2),
        "service_cpu_ms": None
        if cpu_before is None or cpu_after is None
        else round((cpu_after - cpu_before) * 1000, 2),
        "sync_ms": None if m.get("wall_seconds") is None else round(m["wall_seconds"] * 1000, 2),
        "phases_ms": {k: round(v * 1000, 2) for k, v in (m.get("phases") or {}).items() if isinstance(v, (int, float))},
        # each site step's, summed over the sites (change_token, plan_groups, exchange_units, ...)
        "site_phases_ms": {
            k: round(sum((s.get("phases") or {}).get(k, 0.0) for s in sites) * 1000, 2)
            for k in sorted(
                {k for s in sites for k, v in (s.get("phases") or {}).items() if isinstance(v, (int, float))}
            )
        },
        "round_trips": m.get("round_trips"),
        # the link's bytes both ways (headers included), and the agent's own answering time
        "bytes": (m.get("bytes_to_agent") or 0) + (m.get("bytes_from_agent") or 0),
        "agent_ms": round((m.get("agent_seconds") or 0.0) * 1000, 2),
        "strategy": strategy_of(m),
        "executor": m.get("executor"),
        "spark_jobs": m.get("spark_jobs"),
        "rows_updated": m.get("rows_updated"),
    }


def cell(path: str, size: int, change_: str, syncs: list[dict], changed: int) -> dict:
    """The median of one cell's syncs, with each phase's median and the executors seen.

    >>> s = [{"client_ms": c, "sync_ms": c - 5, "phases_ms": {"commit": 1.0}, "executor": "arrow", "rows_updated": 10,
    ...       "strategy": "sketch", "round_trips": 4} for c in (30.0, 20.0, 40.0)]
    >>> c = cell("in-process", 1000, "1%", s, 10)
    >>> c["client_ms"], c["sync_ms"], c["phases_ms"], c["executor"], c["strategy"], c["round_trips"], c["exact_counts"]
    (30.0, 25.0, {'commit': 1.0}, 'arrow', 'sketch', 4, True)
    >>> c["service_cpu_ms"], cell("in-process", 1000, "1%", [{**x, "service_cpu_ms": 10.0 * i} for i, x in enumerate(s)], 10)["service_cpu_ms"]
    (None, 10.0)
    """
    phases = sorted({p for s in syncs for p in s["phases_ms"]})
    site_phases = sorted({p for s in syncs for p in s.get("site_phases_ms", {})})
    executors = sorted({s["executor"] for s in syncs if s["executor"]})
    strategies = sorted({s["strategy"] for s in syncs if s.get("strategy")})
    trips = [s["round_trips"] for s in syncs if s.get("round_trips") is not None]
    timed = [s["sync_ms"] for s in syncs if s["sync_ms"] is not None]
    jobs = [s["spark_jobs"] for s in syncs if s.get("spark_jobs") is not None]
    cpu = [s["service_cpu_ms"] for s in syncs if s.get("service_cpu_ms") is not None]
    return {
        "path": path,
        "rows": size,
        "change": change_,
        "syncs": len(syncs),
        "client_ms": round(statistics.median(s["client_ms"] for s in syncs), 2),
        "client_ms_min": min(s["client_ms"] for s in syncs),
        "client_ms_max": max(s["client_ms"] for s in syncs),
        "sync_ms": round(statistics.median(timed), 2) if timed else None,
        # the mean, not the median: each sync's figure is a whole number of 10 ms ticks
        "service_cpu_ms": round(statistics.fmean(cpu), 2) if cpu else None,
        "phases_ms": {p: round(statistics.median(s["phases_ms"].get(p, 0.0) for s in syncs), 2) for p in phases},
        "site_phases_ms": {
            p: round(statistics.median(s.get("site_phases_ms", {}).get(p, 0.0) for s in syncs), 2) for p in site_phases
        },
        "executor": "+".join(executors) or None,
        "strategy": " / ".join(strategies) or None,
        "round_trips": statistics.median(trips) if trips else None,
        "bytes": statistics.median(s.get("bytes", 0) for s in syncs),
        "agent_ms": round(statistics.median(s.get("agent_ms", 0.0) for s in syncs), 2),
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
    pid = service.proc.pid
    cells = []
    try:
        api.add_source("small", agent.url, token)
        r = api.http.post("/v1/sources/small/mirror", json={"tables": [f"t{n}" for n in args.sizes]})
        r.raise_for_status()
        for size in args.sizes:
            view = f"small_t{size}"
            api.sync(view)  # the load
            # the load queues its sketch table's build in the background (sketch/prep.py), which
            # shares the service's cores and lock with the syncs that follow: the cells measure
            # a view at rest, so the build is given time to end first
            time.sleep(SETTLE_S)
            for _ in range(WARM_UP_SYNCS):  # unmeasured: the first no-change syncs warm their code up
                timed_sync(api, view)
            quiet = [timed_sync(api, view, pid) for _ in range(args.syncs)]
            cells.append(cell(path, size, "none", quiet, 0))
            written = []
            for _ in range(args.syncs):
                write_other(db)
                written.append(timed_sync(api, view, pid))
            cells.append(cell(path, size, FILE_WRITTEN, written, 0))
            changed, busy = 0, []
            for _ in range(args.syncs):
                changed = change(db, size, rng)
                busy.append(timed_sync(api, view, pid))
            cells.append(cell(path, size, "1%", busy, changed))
            cells.append(cell(path, size, AFTER_CHANGES, [timed_sync(api, view, pid) for _ in range(args.syncs)], 0))
            for c in cells[-len(CHANGES) :]:
                log(
                    f"[{path}] {size:>7,} rows, change {c['change']:>18}: {c['client_ms']:8.1f} ms at the client, "
                    f"{c['sync_ms']} ms in the sync, {c['service_cpu_ms']} ms of service CPU, executor {c['executor']}, strategy {c['strategy']}, "
                    f"{c['round_trips']} round trips, phases {c['phases_ms']}, site {c['site_phases_ms']}"
                )
    finally:
        api.close()
        service.stop()
        agent.stop()
    return cells


def crossover(cells: list[dict], change_: str) -> dict:
    """The smallest size at which the Spark path's median is no slower than the in-process path's,
    among the sizes whose two runs' syncs named different executors: at a size where both took
    the same one (a strategy only Spark runs; a service that predates the in-process path syncs
    both runs on Spark) the runs compare nothing, so it is passed over and named
    (`same_executor`); not determined when no size compares.

    >>> cs = [{"path": p, "rows": n, "change": "1%", "client_ms": ms, "executor": e}
    ...       for p, n, ms, e in [("spark", 100, 200, "spark"), ("in-process", 100, 20, "arrow"),
    ...                           ("spark", 10**5, 400, "spark"), ("in-process", 10**5, 500, "arrow")]]
    >>> crossover(cs, "1%")
    {'rows': 100000, 'below': 100, 'same_executor': [], 'note': 'the Spark path is no slower from 100,000 rows'}
    >>> crossover(cs[:2], "1%")["rows"] is None
    True
    >>> crossover([{**c, "executor": None} for c in cs], "1%")["note"]
    'not determined: the two runs did not name different executors'
    >>> crossover([{**c, "executor": "spark"} if c["rows"] == 100 else c for c in cs], "1%")["note"]
    'the Spark path is no slower from 100,000 rows (at 100 rows both runs took one executor: not compared)'
    """
    mine = [c for c in cells if c["change"] == change_]
    by = {(c["path"], c["rows"]): c for c in mine}
    sizes = sorted({c["rows"] for c in mine})
    below, same = None, []
    found: int | None = None
    for n in sizes:
        spark, inproc = by.get(("spark", n)), by.get(("in-process", n))
        if spark is None or inproc is None:
            continue
        if not spark["executor"] or not inproc["executor"] or spark["executor"] == inproc["executor"]:
            same.append(n)
            continue
        if spark["client_ms"] <= inproc["client_ms"]:
            found = n
            break
        below = n
    passed = f" (at {', '.join(f'{n:,}' for n in same)} rows both runs took one executor: not compared)" if same else ""
    if found is not None:
        note = f"the Spark path is no slower from {found:,} rows{passed}"
    elif below is None:
        note = "not determined: the two runs did not name different executors"
        passed = ""
    else:
        note = f"the in-process path is faster at every size measured (up to {below:,} rows): the threshold can be set above it"
    return {"rows": found, "below": below, "same_executor": same, "note": note + ("" if found is not None else passed)}


def summarize(cells: list[dict]) -> dict:
    """Per size: each path's medians at the client, no change and 1 % changed, and the executor it took."""
    out: dict = {}
    for c in cells:
        row = out.setdefault(f"{c['rows']:,} rows", {})
        row[f"{c['path']} · {c['change']} (ms)"] = c["client_ms"]
        row[f"{c['path']} · {c['change']} strategy"] = c.get("strategy")
        row[f"{c['path']} executor"] = c["executor"]
    return out


def markdown(out: dict) -> str:
    lines = [
        "# Small syncs: service time per sync, the in-process path beside the Spark path",
        "",
        f"{out['date']}, commit {out['commit']}. Median of {out['syncs']} syncs a cell, POST with wait on loopback timed "
        "at the client (ms); the sync's own wall time beside it, and the service process's CPU time per sync "
        "(the cell's mean).",
        "",
        "| rows | change | path | executor | strategy | round trips | client ms | sync ms | service CPU ms | min–max |",
        "|---:|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for c in out["cells"]:
        trips = c.get("round_trips")
        lines.append(
            f"| {c['rows']:,} | {c['change']} | {c['path']} | {c['executor'] or '—'} | {c.get('strategy') or '—'} | "
            f"{'—' if trips is None else f'{trips:g}'} | {c['client_ms']:.1f} | "
            f"{c['sync_ms'] if c['sync_ms'] is not None else '—'} | "
            f"{c['service_cpu_ms'] if c.get('service_cpu_ms') is not None else '—'} | "
            f"{c['client_ms_min']:.0f}–{c['client_ms_max']:.0f} |"
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
