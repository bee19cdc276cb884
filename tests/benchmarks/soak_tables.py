"""The soak's default scenario (#52): thousands of mirrored tables, each scheduled, a writer changing them: does the pool keep up?

    python -m tests.benchmarks.soak [--tables 5000] [--minutes 30] [--every-s 300] [--rows-scale 1.0]

A generated legacy schema (`schema_of`): TABLES tables over SOURCES SQLite files, of the
soak's four kinds in turn (soak_sources.py), sized as #52 asks of 5,000: 95 % of 100 to
10,000 rows, 4.5 % of 100,000 and 0.5 % of 1,000,000 (about 72 million rows; --rows-scale
shrinks every table for a trial run). The files are made once, each source in a process
of its own, by SQLite itself (one INSERT … SELECT over a recursive series per table), and
kept under tests/benchmarks/work/soak-tables-cache/; a run works on a copy.

Each source is behind its own agent and mirrored in one request, every view scheduled
every EVERY_S seconds, publishing nowhere. The service runs with its defaults but for
retention (KEEP syncs a view, as the other scenario). First every view loads (the warm-up,
timed); then, for MINUTES minutes, the writer changes the tables and the soak samples the
service's memory and the data directory, and harvests the sync records from the catalog's
file, read-only, every HARVEST_S (5,000 views' records through the API would be a load of
their own). Then the writer stops, the service is started again without its scheduler, a
sample of CHECK_VIEWS views syncs once more and each is compared with its table.

What it measures (soak_tables_summary.py): each scheduled sync's lateness — its start
after its due time, its view's previous sync's end plus the period — against the goal
(95 % within 10 % of the period), by table size and by source (a large table must not
starve the small ones); syncs a minute against the schedules' ask; memory and disk over
the run, which must stay flat.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tests.benchmarks import machine
from tests.benchmarks.soak import HERE, KEEP, RETENTION_S, Soak, _interrupt, conclude
from tests.benchmarks.soak_sources import KINDS, Table
from tests.benchmarks.soak_tables_summary import findings, markdown, summarize

#: The schema's sources: SQLite files, each behind its agent.
SOURCES = ("erp1", "erp2", "erp3", "erp4", "erp5")
#: The schema's sizes as #52 gives them for 5,000 tables: (share of the tables, rows), the small ones drawn in a range.
LARGE_SIZES = ((0.005, 1_000_000), (0.045, 100_000))
SMALL_ROWS = (100, 10_000)
#: Bump when the generated files change: a cache of another version is made again.
SCHEMA_VERSION = 1
#: Seconds between two harvests of the sync records (well within KEEP periods).
HARVEST_S = 30.0
#: Views synced once more and compared with their tables at the end (a sample: all 5,000 would be an hour).
CHECK_VIEWS = 30
#: The names the generated rows take (the writer's are soak_sources.NAMES).
NAME_EXPR = "printf('n%d', abs(random()) % 8)"


def schema_of(tables: int, rows_scale: float, seed: int) -> list[dict]:
    """The generated schema: each table's source, name, kind and rows, the large ones spread over the sources.

    >>> s = schema_of(5000, 1.0, 52)
    >>> sum(t["rows"] == 1_000_000 for t in s), sum(t["rows"] == 100_000 for t in s), len(s)
    (25, 225, 5000)
    >>> sorted({t["source"] for t in s if t["rows"] == 1_000_000})
    ['erp1', 'erp2', 'erp3', 'erp4', 'erp5']
    >>> [(t["source"], t["name"], t["kind"], t["rows"]) for t in schema_of(100, 0.01, 52)[:2]]
    [('erp1', 't_0001', 'int_key', 10000), ('erp2', 't_0001', 'int_key', 1000)]
    """
    rng = random.Random(seed)
    sizes = [rows for share, rows in LARGE_SIZES for _ in range(max(1, round(share * tables)))]
    sizes += [rng.randint(*SMALL_ROWS) for _ in range(tables - len(sizes))]
    out, per_source = [], dict.fromkeys(SOURCES, 0)
    for i, rows in enumerate(sizes):
        source = SOURCES[i % len(SOURCES)]
        per_source[source] += 1
        kind = KINDS[(i // len(SOURCES)) % len(KINDS)]
        out.append(
            {
                "source": source,
                "name": f"t_{per_source[source]:04d}",
                "kind": kind,
                "rows": max(10, round(rows * rows_scale)),
            }
        )
    return out


def _select(kind: str) -> str:
    """The SELECT over the series `n(x)` that makes a table's rows, by kind (keys as the writer's never are)."""
    return {
        "int_key": f"SELECT x, {NAME_EXPR}, abs(random()) % 1000 FROM n",
        "text_key": f"SELECT printf('g-%08d', x), {NAME_EXPR}, abs(random()) % 1000 FROM n",
        "composite_key": f"SELECT x % 20, x, {NAME_EXPR}, abs(random()) % 1000 FROM n",
        "no_key": f"SELECT {NAME_EXPR}, abs(random()) % 1000 FROM n",
    }[kind]


def make_source(path: str, tables: list[dict]) -> str:
    """Write one source's SQLite file (its tables, filled by SQLite itself); its path."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    for t in tables:
        table = Table(t["source"], t["name"], t["kind"])
        conn.execute(table.ddl(postgres=False))
        conn.execute(
            f"INSERT INTO {table.name} WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?) "
            + _select(table.kind),
            (t["rows"],),
        )
        conn.commit()
    conn.execute("PRAGMA journal_mode=WAL")  # the agent reads while the writer writes
    conn.close()
    return path


def cached_schema(tables: int, rows_scale: float, seed: int) -> Path:
    """The folder of the generated sources and their spec, made once for these arguments."""
    cache = HERE / "work" / "soak-tables-cache" / f"v{SCHEMA_VERSION}-{tables}-{rows_scale:g}-{seed}"
    if (cache / "spec.json").exists():
        return cache
    building = cache.with_name(cache.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    schema = schema_of(tables, rows_scale, seed)
    started = time.monotonic()
    with ProcessPoolExecutor(min(len(SOURCES), os.cpu_count() or 1)) as pool:
        jobs = [
            pool.submit(make_source, str(building / f"{s}.db"), [t for t in schema if t["source"] == s])
            for s in SOURCES
        ]
        for job in jobs:
            job.result()
    spec = {
        "rows": max(t["rows"] for t in schema),
        "sources": {s: {"kind": "sqlite", "path": f"{s}.db"} for s in SOURCES},
        "tables": schema,
        "made_s": round(time.monotonic() - started, 1),
    }
    (building / "spec.json").write_text(json.dumps(spec, indent=1))
    building.rename(cache)
    print(f"generated {tables} tables ({sum(t['rows'] for t in schema):,} rows) in {spec['made_s']} s", flush=True)
    return cache


class TablesSoak(Soak):
    """The soak's processes for the tables scenario: the sources and mirrors are the generated schema's."""

    def service_env(self, scheduler: bool) -> dict:
        return {
            "SERVICE_KEEP_DELTAS": str(KEEP),
            "SERVICE_RETENTION_INTERVAL_S": str(RETENTION_S),
            "SERVICE_SOURCE_CHECK_INTERVAL_S": "300",
            "SERVICE_SCHEDULER": "true" if scheduler else "false",
            **({"SERVICE_MAX_CONCURRENT_SYNCS": str(self.args.pool)} if self.args.pool else {}),
        }

    def set_up(self):
        cache = cached_schema(self.args.tables, self.args.rows_scale, self.args.seed)
        spec = json.loads((cache / "spec.json").read_text())
        for source, where in spec["sources"].items():
            shutil.copyfile(cache / where["path"], self.work / where["path"])
            where["path"] = str(self.work / where["path"])
            self.start_agent(source, f"sqlite:///{where['path']}")
        (self.work / "spec.json").write_text(json.dumps(spec))
        self.start_service()
        assert self.service is not None
        from workloads.harness import Api

        api = Api(self.service.url, timeout=3600)
        api.http.event_hooks["response"] = [self._count]
        rows = {(t["source"], t["name"]): t for t in spec["tables"]}
        for source in SOURCES:
            for m in self.mirror(api, source):
                t = rows[(source, m["table"])]
                self.views[m["view"]] = {"source": source, "table": m["table"], "kind": t["kind"], "rows": t["rows"]}
        return api

    def harvest(self, since: str) -> None:
        """Every sync that ended at or after `since`, from the catalog's file (read-only), into `syncs`."""
        catalog = self.data / "catalog.db"
        conn = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=30)
        try:
            found = conn.execute(
                "SELECT id, view, status, error_code, trigger, created_at, started_at, finished_at, queued_s, "
                "json_extract(metrics, '$.wall_seconds') FROM syncs WHERE finished_at >= ?",
                (since,),
            ).fetchall()
        finally:
            conn.close()
        keys = ("id", "view", "status", "error_code", "trigger", "created_at", "started_at", "finished_at", "queued_s")
        with self.lock:
            for row in found:
                self.syncs[row[0]] = dict(zip(keys, row[:-1], strict=True)) | {"wall_s": row[-1]}

    def harvester(self, since: str) -> None:
        while not self.stop.wait(HARVEST_S):
            try:
                self.harvest(since)
            except sqlite3.Error as e:  # the catalog busy past the timeout: the next harvest reads it
                print(f"harvest: {e}", flush=True)

    def _read(self, sql: str) -> list[tuple]:
        """Rows of a query of the catalog's file, opened read-only."""
        conn = sqlite3.connect(f"file:{self.data / 'catalog.db'}?mode=ro", uri=True, timeout=30)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def loaded(self) -> int:
        """Views whose load has succeeded."""
        return self._read("SELECT count(DISTINCT view) FROM syncs WHERE status = 'succeeded'")[0][0]

    def active(self) -> list[dict]:
        """The syncs queued or running now."""
        keys = ("id", "view", "status", "trigger", "created_at", "started_at", "finished_at")
        found = self._read(f"SELECT {', '.join(keys)} FROM syncs WHERE status IN ('queued', 'running')")
        return [dict(zip(keys, row, strict=True)) for row in found]


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")


def run(args: argparse.Namespace) -> dict:
    work = HERE / "work" / "soak-tables"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    (work / "logs").mkdir(parents=True)
    soak = TablesSoak(args, work)
    out: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "settings": {
            "scenario": "tables",
            "tables": args.tables,
            "rows_scale": args.rows_scale,
            "minutes": args.minutes,
            "every_s": args.every_s,
            "writes_per_s": args.writes_per_s,
            "pool": args.pool or "service default",
            "warm_up_limit_minutes": args.warm_up_limit_minutes,
            "keep_deltas": KEEP,
            "destinations": [],
            "small_sync_rows": os.environ.get("SERVICE_SMALL_SYNC_ROWS", "service default"),
        },
    }
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        started = time.monotonic()
        api = soak.set_up()
        out["set_up_s"] = round(time.monotonic() - started, 1)
        print(f"{len(soak.views)} views mirrored in {out['set_up_s']} s; loading them", flush=True)
        sampler = threading.Thread(target=soak.sample, name="soak-sampler", daemon=True)
        sampler.start()
        warm, since = (
            time.monotonic(),
            _iso(time.time()),
        )  # the records from the loads on: a view's first due sync follows its load
        while (done := soak.loaded()) < len(soak.views) and time.monotonic() - warm < 60 * args.warm_up_limit_minutes:
            time.sleep(10)
        out["warm_up"] = {"loaded": done, "views": len(soak.views), "seconds": round(time.monotonic() - warm, 1)}
        print(f"warm-up: {done} of {len(soak.views)} views loaded in {out['warm_up']['seconds']} s", flush=True)
        soak.start_writer()
        run_start = time.time()
        harvester = threading.Thread(target=soak.harvester, args=(since,), daemon=True)
        harvester.start()
        time.sleep(60 * args.minutes)
        run_end = time.time()
        soak.stop.set()
        for t in (sampler, harvester):
            t.join(timeout=120)
        soak.harvest(since)
        out["active_at_end"] = soak.active()
        out["writer"] = soak.stop_writer()
        print("writer stopped; restarting the service without its scheduler for the check", flush=True)
        assert soak.service is not None
        soak.service.stop()
        soak.start_service(scheduler=False)
        # the syncs the scheduler had queued are queued again at the start: cancelled (the queued
        # ones in one call, those that started meanwhile one by one), the sample's are the check's
        r = api.http.delete("/v1/syncs", params={"status": "queued"})
        r.raise_for_status()
        out["cancelled_at_restart"] = r.json()["cancelled"]
        for s in soak.active():
            api.http.delete(f"/v1/views/{s['view']}/syncs/{s['id']}")
        deadline = time.monotonic() + 600
        while (left := soak.active()) and time.monotonic() < deadline:
            time.sleep(1)
        if left:
            out["stuck_after_restart"] = left[:20]
        sample = sorted(random.Random(args.seed).sample(sorted(soak.views), min(CHECK_VIEWS, len(soak.views))))
        out["final"] = dict(soak.final_syncs(api, sample))
        checked = soak.check(api, sample)
        out["check"] = {
            "views": len(checked),
            "exact": sum(1 for c in checked.values() if c == "exact"),
            "differ": {name: c for name, c in checked.items() if c != "exact"},
        }
        out["service_log"] = soak.service_log()
        soak.recorded(out, run_start, run_end)
        api.close()
    finally:
        signal.signal(signal.SIGTERM, previous)
        soak.close()
    out = conclude(out, work, summarize, findings)
    del out["views"]  # 5,000 of them: the summary holds what they say
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tables", type=int, default=5000, help="tables of the generated schema (one view each)")
    parser.add_argument("--rows-scale", type=float, default=1.0, help="scale every table's rows (a trial run: 0.01)")
    parser.add_argument("--pool", type=int, default=0, help="SERVICE_MAX_CONCURRENT_SYNCS (0: the service's default)")
    parser.add_argument(
        "--warm-up-limit-minutes", type=float, default=240, help="start the measured run then, every view loaded or not"
    )


def save(out: dict, args: argparse.Namespace) -> None:
    """The results, their command without the faults scenario's options."""
    shown = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in ("views", "rows")})
    machine.save(out, shown, "tests.benchmarks.soak", markdown)
