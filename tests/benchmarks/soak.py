"""Soak: many mirrored views on one service, scheduled, with a writer: thousands of tables (#52), or hundreds with killed processes (#38).

    python -m tests.benchmarks.soak --scenario faults [--minutes 30] [--views 210] [--every-s 180] [--out PATH]

(The default scenario, `--scenario tables`, is thousands of generated tables: soak_tables.py.
What follows is the faults scenario's.)

Three sources — two SQLite files and a PostgreSQL database (a server this benchmark starts,
workloads/postgres.py) — hold VIEWS small tables between them, of four kinds in turn:
an integer key, a text key, a composite key, no key (tests/benchmarks/soak_sources.py).
Each source is behind its own agent process and is mirrored in one request (`POST
/v1/sources/{name}/mirror`), every view scheduled every EVERY_S seconds, publishing
nowhere (`destinations: []`: the soak is about the syncs). The service runs with a pool
of POOL syncs, one at a time per source, and keeps KEEP syncs per view (SERVICE_KEEP_DELTAS,
a count, removed every RETENTION_S), so that retention acts within the run.

For MINUTES minutes: a writer process changes the tables (soak_sources.py), the soak's
client reads the views, sources, sync records and /metrics and asks for a sync now and then
(counting every HTTP status it is answered), the service's memory (its process and its Spark
JVM) and the data directory's size are sampled every SAMPLE_S, and at random times an agent
or the service is SIGKILLed and started again after a few seconds (agents throughout, the
service in the run's first 30 % only: growth compares the window at 45–55 % with the last
tenth, which must see one service, warmed up; tests/benchmarks/soak_faults.py).

Then the writer stops, the service is stopped and started without its scheduler, every view
syncs once more, and each is compared with its table read straight from the source. Every
process the soak started is stopped on the way out, Ctrl-C included; a new run starts afresh.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.benchmarks import machine
from tests.benchmarks.soak_faults import plan_faults
from tests.benchmarks.soak_sources import Table, connect, create, tables_of
from tests.benchmarks.soak_summary import findings, markdown, summarize, timeline
from workloads.harness import ROOT, Api, Process, free_port, start_agent, start_service
from workloads.postgres import start_postgres

HERE = Path(__file__).resolve().parent
#: The sources: two SQLite files and a PostgreSQL database.
SOURCES = ("sq1", "sq2", "pg")
#: Syncs at once (one per source: the three read side by side), and per source.
POOL, PER_SOURCE = 3, 1
#: Syncs kept per view (SERVICE_KEEP_DELTAS), and seconds between two rounds of retention: few,
#: so that the data directory reaches its bound (three syncs of each view) well before the middle.
KEEP, RETENTION_S = 3, 60
#: Seconds between two samples of memory and disk, and between two rounds of the client.
SAMPLE_S, CLIENT_S = 5.0, 5.0
#: Each view's sync records are read about this often, well within KEEP syncs of a view.
RECORDS_S = 60.0
#: A failed sync that ended this long after a fault's process answered again still counts as the fault's.
FAULT_GRACE_S = 60.0
#: A sync queued or running this long (or longer than three periods) at the end is stuck.
STUCK_S = 600.0


def data_bytes(root: Path) -> int:
    """Bytes of the files under `root` (files removed while walking are skipped)."""
    total = 0
    for folder, _, files in os.walk(root):
        for f in files:
            try:
                total += os.stat(os.path.join(folder, f)).st_size
            except OSError:
                pass
    return total


class Soak:
    """The soak's processes and what it records; `close` stops every process it started."""

    def __init__(self, args: argparse.Namespace, work: Path):
        self.args, self.work = args, work
        self.logs = work / "logs"
        self.data = work / "data"
        self.rng = random.Random(args.seed)
        self.agents: dict[str, Process] = {}
        self.agent_urls: dict[str, str] = {}
        self.service: Process | None = None
        self.service_port = free_port()
        self.postgres = None
        self.writer: subprocess.Popen | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.samples: list[tuple[float, int | None, int]] = []
        self.syncs: dict[str, dict] = {}
        self.statuses: Counter = Counter()
        self.no_answer: Counter = Counter()
        self.views: dict[str, dict] = {}

    # -- processes ------------------------------------------------------------------------

    def service_env(self, scheduler: bool) -> dict:
        return {
            "SERVICE_MAX_CONCURRENT_SYNCS": str(POOL),
            "SERVICE_MAX_SYNCS_PER_SOURCE": str(PER_SOURCE),
            "SERVICE_KEEP_DELTAS": str(KEEP),
            "SERVICE_RETENTION_INTERVAL_S": str(RETENTION_S),
            "SERVICE_SOURCE_CHECK_INTERVAL_S": "30",
            "SERVICE_SCHEDULER": "true" if scheduler else "false",
        }

    def start_service(self, scheduler: bool = True) -> None:
        self.service = start_service(self.data, self.logs, port=self.service_port, env=self.service_env(scheduler))

    def start_agent(self, source: str, db_url: str, port: int | None = None) -> None:
        self.agents[source] = start_agent(db_url, self.logs, port=port)
        self.agent_urls[source] = db_url

    def close(self) -> None:
        """Stop every process the soak started (each by its own id)."""
        self.stop.set()
        if self.writer and self.writer.poll() is None:
            os.killpg(self.writer.pid, signal.SIGKILL)
            self.writer.wait(timeout=30)
        for process in [*self.agents.values(), self.service]:
            if process is not None:
                process.stop()
        if self.postgres is not None:
            self.postgres.stop()
        # a process interrupted while it started (Ctrl-C before it answered) has no handle
        # here: each child left is the leader of its own session, its group is its own
        for pid in machine.children(os.getpid()):
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

    # -- set-up ---------------------------------------------------------------------------

    def set_up(self) -> Api:
        """The sources, their agents, the service and the mirrors; returns the soak's client."""
        per_source = [self.args.views // 3 + (1 if i < self.args.views % 3 else 0) for i in range(3)]
        (self.work / "pg").mkdir()
        self.postgres = start_postgres(self.work / "pg", dbname="legacy")
        spec: dict = {"rows": self.args.rows, "sources": {}, "tables": []}
        for source, count in zip(SOURCES, per_source):
            if source == "pg":
                where = {"kind": "postgres", "url": self.postgres.owner_url}
                db_url = self.postgres.reader_url
            else:
                where = {"kind": "sqlite", "path": str(self.work / f"{source}.db")}
                db_url = f"sqlite:///{where['path']}"
            tables = tables_of(source, count)
            conn = connect(where)
            create(conn, tables, self.args.rows, self.rng)
            conn.close()
            spec["sources"][source] = where
            spec["tables"] += [{"source": t.source, "name": t.name, "kind": t.kind} for t in tables]
            self.start_agent(source, db_url)
        (self.work / "spec.json").write_text(json.dumps(spec, indent=1))
        self.start_service()
        assert self.service is not None
        api = Api(self.service.url, timeout=600)
        api.http.event_hooks["response"] = [self._count]
        for source in SOURCES:
            for m in self.mirror(api, source):
                self.views[m["view"]] = {"source": source, "table": m["table"], "key": m["key"]}
        kinds = {(t["source"], t["name"]): t["kind"] for t in spec["tables"]}
        for view in self.views.values():
            view["kind"] = kinds[(view["source"], view["table"])]
        return api

    def mirror(self, api: Api, source: str) -> list[dict]:
        """Register the source's agent and mirror every table of it, each view on the soak's
        schedule and publishing nowhere; the views made (none may be skipped)."""
        api.add_source(source, self.agents[source].url)
        r = api.http.post(
            f"/v1/sources/{source}/mirror", json={"schedule": {"every_s": self.args.every_s}, "destinations": []}
        )
        r.raise_for_status()
        done = r.json()
        if done.get("skipped"):
            raise AssertionError(f"the mirror of {source} skipped tables: {done['skipped']}")
        return done["created"]

    def start_writer(self) -> None:
        self.writer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.benchmarks.soak_sources",
                "--spec",
                str(self.work / "spec.json"),
                "--writes-per-s",
                str(self.args.writes_per_s),
                "--seed",
                str(self.args.seed),
                "--report",
                str(self.work / "writer.json"),
            ],
            cwd=ROOT,
            stdout=open(self.logs / "writer.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop_writer(self) -> dict:
        """Stop the writer between two transactions; what it did (its transactions by kind), or
        how it ended if it ended before (a soak whose writer died says so)."""
        assert self.writer is not None
        died = self.writer.poll()
        if died is None:
            self.writer.send_signal(signal.SIGTERM)
            self.writer.wait(timeout=60)
        report = self.work / "writer.json"
        if died is not None or not report.exists():
            return {"died": f"exit {self.writer.returncode}: see logs/writer.log"}
        return json.loads(report.read_text())

    # -- what runs beside the faults -------------------------------------------------------

    def _count(self, response: httpx.Response) -> None:
        with self.lock:
            self.statuses[response.status_code] += 1

    def sample(self) -> None:
        """Memory of the service's process tree and the data directory's bytes, every SAMPLE_S."""
        while not self.stop.wait(SAMPLE_S):
            service = self.service
            split = machine.tree_rss(service.proc.pid) if service and service.proc.poll() is None else {}
            kb = sum(split.values()) if split else None
            with self.lock:
                self.samples.append((round(time.time(), 1), kb, data_bytes(self.data)))

    def client(self, api: Api) -> None:
        """A user of the API: views, sources, metrics, sync records, a sync asked for now and then."""
        names = sorted(self.views)
        per_round = max(1, round(len(names) * CLIENT_S / RECORDS_S))
        at = 0
        rounds = 0
        while not self.stop.wait(CLIENT_S):
            rounds += 1
            try:
                api.http.get("/v1/views")
                if rounds % 3 == 0:
                    api.http.get("/v1/sources")
                    api.http.get("/metrics")
                if rounds % 6 == 0:
                    api.http.post(f"/v1/views/{self.rng.choice(names)}/syncs")
                if rounds % 12 == 0:
                    api.http.get(f"/v1/views/{self.rng.choice(names)}/rows")
                for _ in range(per_round):
                    self.read_syncs(api, names[at % len(names)])
                    at += 1
            except httpx.TransportError as e:  # the service is down: a fault, not an answer
                with self.lock:
                    self.no_answer[type(e).__name__] += 1
            except ValueError as e:  # an answer that is not what the API says (counted, never fatal)
                with self.lock:
                    self.no_answer[f"unreadable: {type(e).__name__}"] += 1

    def read_syncs(self, api: Api, view: str) -> None:
        r = api.http.get(f"/v1/views/{view}/syncs")
        if r.status_code == 200:
            with self.lock:
                for s in r.json():
                    self.syncs[s["id"]] = {
                        k: s.get(k)
                        for k in ("view", "status", "error_code", "queued_s", "trigger", "created_at", "finished_at")
                    } | {"error": (s.get("error") or "")[:300]}

    def recorded(self, out: dict, run_start: float, run_end: float) -> None:
        """Put what the run recorded into `out`: its times, the views, the samples, the syncs."""
        out["run"] = {"started_at": run_start, "ended_at": run_end}
        out["views"] = self.views
        out["samples"] = self.samples
        out["syncs"] = self.syncs

    # -- faults ---------------------------------------------------------------------------

    def inject(self, kind: str, target: str, down_s: float, run_start: float) -> dict:
        """SIGKILL the service or an agent, wait `down_s`, start it again on the same port; the
        fault's times in seconds into the run: killed `at_s`, answering again `outage_s` later."""
        killed = time.time()
        if kind == "service":
            assert self.service is not None
            self.service.kill()
            self.service.stop()
            time.sleep(down_s)
            self.start_service()
        else:
            agent = self.agents[target]
            agent.kill()
            agent.stop()
            time.sleep(down_s)
            self.start_agent(target, self.agent_urls[target], port=agent.port)
        outage = round(time.time() - killed, 1)
        print(f"fault: {kind} {target} killed, back after {outage} s", flush=True)
        return {
            "kind": kind,
            "target": target,
            "at_s": round(killed - run_start, 1),
            "down_s": down_s,
            "outage_s": outage,
        }

    # -- the end --------------------------------------------------------------------------

    def stuck(self, api: Api) -> list[dict]:
        """Syncs queued or running for longer than STUCK_S (or three periods)."""
        limit = max(STUCK_S, 3 * self.args.every_s)
        now = time.time()
        return [
            {"view": s["view"], "id": s["id"], "status": s["status"], "age_s": round(now - _at(s["created_at"]))}
            for s in api.active_syncs()
            if now - _at(s["created_at"]) > limit
        ]

    def final_syncs(self, api: Api, names: list[str] | None = None) -> Counter:
        """One more sync of each view (or of those `names`), three at a time (the sources side by side)."""

        def one(view: str) -> str:
            r = api.http.post(f"/v1/views/{view}/syncs", params={"wait": "true"})
            if r.status_code != 200:
                return f"answer {r.status_code}"
            sync = r.json()
            self.syncs[sync["id"]] = sync
            return sync["status"] if sync["status"] == "succeeded" else f"failed: {sync['error_code']}"

        # the sources in turn, so that the three syncs at once read three sources
        order = sorted(names or self.views, key=lambda v: (self.views[v]["table"], self.views[v]["source"]))
        with ThreadPoolExecutor(POOL) as pool:
            return Counter(pool.map(one, order))

    def check(self, api: Api, names: list[str] | None = None) -> dict[str, str]:
        """Each view (or those `names`) against its table read straight from the source: "exact", or how it differs."""
        spec = json.loads((self.work / "spec.json").read_text())
        conns = {source: connect(where) for source, where in spec["sources"].items()}
        out = {}
        try:
            for name in sorted(names or self.views):
                view = self.views[name]
                table = Table(view["source"], view["table"], view["kind"])
                columns = api.http.get(f"/v1/views/{name}").json()["columns"]
                truth = conns[view["source"]].rows(table)
                if columns != table.columns:
                    out[name] = f"columns {columns}, the table's {table.columns}"
                    continue
                rows = Counter(tuple(r[c] for c in columns) for r in api.rows(name))
                if rows == truth:
                    out[name] = "exact"
                else:
                    out[name] = f"{sum((truth - rows).values())} rows missing, {sum((rows - truth).values())} extra"
        finally:
            for conn in conns.values():
                conn.close()
        return out

    def retention(self, api: Api) -> dict:
        """Sync records and deltas held at the end, and what an early sync, long removed, answers."""
        held = sum(len(api.http.get(f"/v1/views/{v}/syncs").json()) for v in self.views)
        deltas = [len(list(d.iterdir())) for d in self.data.rglob("deltas") if d.is_dir()]
        first: dict[str, dict] = {}
        for sync_id, s in sorted(self.syncs.items(), key=lambda kv: kv[1]["created_at"]):
            first.setdefault(s["view"], {"id": sync_id, **s})
        answers = Counter(
            api.http.get(f"/v1/views/{s['view']}/syncs/{s['id']}").status_code for s in list(first.values())[:20]
        )
        return {
            "keep": str(KEEP),
            "records_held": held,
            "most_deltas_in_a_view": max(deltas, default=0),
            "removed_answers": {str(k): v for k, v in sorted(answers.items())},
        }

    def service_log(self) -> dict:
        """Tracebacks and 5xx answers written in the service's log over the run."""
        tracebacks = lines_5xx = 0
        for log in self.logs.glob("service-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                tracebacks += line.startswith("Traceback")
                lines_5xx += bool(re.search(r'" 5\d\d\b|\b5\d\d Internal Server Error', line))
        return {"tracebacks": tracebacks, "lines_5xx": lines_5xx}


def _interrupt(*_) -> None:
    """SIGTERM ends the soak as Ctrl-C does: through its clean-up."""
    raise KeyboardInterrupt


def _at(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def run(args: argparse.Namespace) -> dict:
    work = HERE / "work" / "soak"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    (work / "logs").mkdir(parents=True)
    soak = Soak(args, work)
    out: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "settings": {
            "minutes": args.minutes,
            "views": args.views,
            "rows_per_table": args.rows,
            "every_s": args.every_s,
            "writes_per_s": args.writes_per_s,
            "pool": POOL,
            "per_source": PER_SOURCE,
            "keep_deltas": KEEP,
            "retention_interval_s": RETENTION_S,
            "fault_grace_s": FAULT_GRACE_S,
            "destinations": [],
        },
    }
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        started = time.monotonic()
        api = soak.set_up()
        out["set_up_s"] = round(time.monotonic() - started, 1)
        print(
            f"{len(soak.views)} views mirrored in {out['set_up_s']} s; soaking for {args.minutes} minutes", flush=True
        )
        soak.start_writer()
        threads = [
            threading.Thread(target=soak.sample, name="soak-sampler", daemon=True),
            threading.Thread(target=soak.client, args=(api,), name="soak-client", daemon=True),
        ]
        for t in threads:
            t.start()
        run_start = time.time()
        span_s = 60 * args.minutes
        faults = []
        for fault in plan_faults(span_s, soak.rng, SOURCES):
            time.sleep(max(0.0, run_start + fault.at_s - time.time()))
            faults.append(soak.inject(fault.kind, fault.target, fault.down_s, run_start))
        time.sleep(max(0.0, run_start + span_s - time.time()))
        out["stuck"] = soak.stuck(api)
        soak.stop.set()
        for t in threads:
            t.join(timeout=120)
        run_end = time.time()
        out["writer"] = soak.stop_writer()
        print("writer stopped; restarting the service without its scheduler for the final syncs", flush=True)
        assert soak.service is not None
        soak.service.stop()
        soak.start_service(scheduler=False)
        try:
            api.wait_idle(within_s=300)
        except AssertionError as e:
            out["stuck"].append({"after_restart": str(e)[:500]})
        out["final"] = dict(soak.final_syncs(api))
        checked = soak.check(api)
        out["check"] = {
            "views": len(checked),
            "exact": sum(1 for c in checked.values() if c == "exact"),
            "differ": {name: c for name, c in checked.items() if c != "exact"},
        }
        left = api.active_syncs()
        out["stuck"] += [{"view": s["view"], "id": s["id"], "status": s["status"], "after": "final"} for s in left]
        out["retention"] = soak.retention(api)
        out["service_log"] = soak.service_log()
        out["client"] = {
            "statuses": {str(k): v for k, v in sorted(soak.statuses.items())},
            "no_answer": dict(soak.no_answer),
        }
        out["faults"] = faults
        soak.recorded(out, run_start, run_end)
        api.close()
    finally:
        signal.signal(signal.SIGTERM, previous)
        soak.close()
    return conclude(out, work, summarize, findings)


def conclude(out: dict, work: Path, summarize: Callable[[dict], dict], findings: Callable[[dict], list]) -> dict:
    """What was recorded, kept before anything is made of it (a summary that fails loses no
    run), then its summary, findings and minutes in place of the sync records."""
    (work / "recorded.json").write_text(json.dumps(out, default=str))
    out["summary"] = summarize(out)
    out["findings"] = findings(out["summary"])
    out["minutes"] = timeline(out["syncs"].values(), out["samples"], out["run"]["started_at"], out["run"]["ended_at"])
    del out["syncs"]  # thousands of records: the summary and the minutes hold what they say
    return out


def main() -> None:
    from tests.benchmarks import soak_tables

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        choices=("tables", "faults"),
        default="tables",
        help="tables: thousands of generated tables, is the pool keeping up (soak_tables.py); "
        "faults: hundreds of small views with processes killed (this module)",
    )
    parser.add_argument("--minutes", type=float, default=30, help="how long the writer (and the faults) run")
    parser.add_argument("--views", type=int, default=210, help="faults: tables (one view each), over the three sources")
    parser.add_argument("--rows", type=int, default=200, help="faults: rows of each table at the start")
    parser.add_argument("--every-s", type=int, help="each view's schedule period (default: tables 300, faults 180)")
    parser.add_argument("--writes-per-s", type=float, default=10.0, help="the writer's transactions a second")
    parser.add_argument("--seed", type=int, default=38)
    soak_tables.add_arguments(parser)
    parser.add_argument("--out", type=Path, help="results file stem (default: results/soak-tables, results/soak)")
    args = parser.parse_args()
    tables = args.scenario == "tables"
    args.every_s = args.every_s or (300 if tables else 180)
    args.out = args.out or HERE / "results" / ("soak-tables" if tables else "soak")
    if tables:
        soak_tables.save(soak_tables.run(args), args)
    else:
        machine.save(run(args), args, "tests.benchmarks.soak", markdown)


if __name__ == "__main__":
    main()
