"""A long load whose agent is killed near its end: resumed, beside an undisturbed load and starting over.

    python -m tests.benchmarks.resumed [--rows 10000000] [--at 0.9] [--out PATH]

The students workload (workloads/generators.py) in a SQLite file, behind one agent and a
relay (workloads/relay.py), and two views of the same query. `whole` loads
undisturbed: the reference. `resumed` loads too, but once `--at` of the undisturbed load's
bytes have crossed the relay, it holds the answer (so the sockets' buffers hold no more than
that), the agent is killed (SIGKILL) and started again on the same port, and the relay cuts
the held answer: the sync's retry resumes after the last key it kept
(docs/operations/failure.md, "Long reads resume").

Per load: the sync's wall time and its extraction's, the bytes from the agent (both
attempts), the rows each attempt received. Starting over is estimated as the failed
attempt's seconds and bytes plus the undisturbed load's: what the retry cost before reads
resumed. The resumed view's rows are counted against the source's.
"""

from __future__ import annotations

import argparse
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

from tests.benchmarks import machine
from workloads.generators import STUDENTS, WORKLOADS
from workloads.harness import Api, start_agent, start_service
from workloads.relay import Relay

HERE = Path(__file__).resolve().parent
SOURCE, WHOLE, RESUMED = "resumesrc", "whole", "resumed"


def _record(api: Api, view: str, sync_id: str) -> dict:
    return api.http.get(f"/v1/views/{view}/syncs/{sync_id}").json()


def _wait(api: Api, view: str, sync_id: str, every_s: float) -> dict:
    while (record := _record(api, view, sync_id))["status"] not in ("succeeded", "failed"):
        time.sleep(every_s)
    return record


def _entry(record: dict, seconds: float) -> dict:
    m = record["metrics"]
    return {
        "status": record["status"],
        "error": record.get("error"),
        "seconds": round(seconds, 2),
        "wall_seconds": m.get("wall_seconds"),
        "extract_s": m.get("phases", {}).get("extract_sites"),
        "bytes_from_agent": m.get("bytes_from_agent"),
        "bytes_to_agent": m.get("bytes_to_agent"),
        "rows_received": m.get("rows_received"),
        "resumed_from_rows": m.get("resumed_from_rows"),
        "rows_in_view": m.get("rows_in_view"),
        "retries": m.get("retries"),
        "attempts": m.get("attempts", []),
    }


class KillPoint(Relay):
    """A relay that holds every answer once `arm(n)`'s n bytes of answers have crossed it."""

    def __init__(self, target_host: str, target_port: int):
        super().__init__(target_host, target_port)
        self.at_bytes: int | None = None
        self.sent = 0
        self.reached = threading.Event()

    def arm(self, at_bytes: int) -> None:
        self.at_bytes, self.sent = at_bytes, 0
        self.reached.clear()

    def _forward(self, data: bytes, sink: socket.socket, leg: object, to_target: bool) -> bool:
        sink.sendall(data)
        if not to_target and self.at_bytes is not None:
            self.sent += len(data)
            if self.sent >= self.at_bytes and not self.reached.is_set():
                self.hold()  # the next chunk waits: the service has at most these bytes
                self.reached.set()
        return True


def killed_load(api: Api, proxy: KillPoint, agent, db: Path, logs: Path, at_bytes: int) -> tuple[dict, object, float]:
    """The resumed view's load, its agent killed once `at_bytes` crossed; the entry, the new agent, its start-up seconds."""
    started = time.monotonic()
    proxy.arm(at_bytes)
    queued = api.http.post(f"/v1/views/{RESUMED}/syncs").json()
    while not proxy.reached.wait(0.5):
        if _record(api, RESUMED, queued["id"])["status"] in ("succeeded", "failed"):
            raise SystemExit(f"the load ended before {at_bytes:,} bytes crossed")
    port = agent.port
    agent.kill()
    t0 = time.monotonic()
    agent = start_agent(f"sqlite:///{db}", logs, port=port)
    restart_s = time.monotonic() - t0
    proxy.cut()
    record = _wait(api, RESUMED, queued["id"], 0.5)
    return _entry(record, time.monotonic() - started), agent, restart_s


def run(args: argparse.Namespace) -> dict:
    work = HERE / "work" / "resumed"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    logs = work / "logs"
    logs.mkdir(parents=True)
    sim = WORKLOADS["students"].simulator(work / "students.db", seed=args.seed)
    started = time.monotonic()
    sim.create(args.rows)
    out: dict = {"rows": args.rows, "at": args.at, "machine": machine.describe()}
    out["generated_s"] = round(time.monotonic() - started, 1)
    service = start_service(work / "data", logs)
    agent = start_agent(f"sqlite:///{sim.path}", logs)
    proxy = KillPoint("127.0.0.1", agent.port)
    api = Api(service.url, timeout=6 * 3600)
    try:
        api.add_source(SOURCE, proxy.url)
        sql = STUDENTS.view_sql.format(source=SOURCE)
        api.add_view(WHOLE, sql)
        api.add_view(RESUMED, sql)
        t0 = time.monotonic()
        whole = api.sync(WHOLE)
        out["whole"] = _entry(whole, time.monotonic() - t0)
        at_bytes = int(args.at * out["whole"]["bytes_from_agent"])
        out["resumed"], agent, out["agent_restart_s"] = killed_load(api, proxy, agent, sim.path, logs, at_bytes)
        with sqlite3.connect(sim.path) as c:
            out["source_rows"] = c.execute(
                f"SELECT COUNT(*) FROM ({STUDENTS.view_sql.format(source='main')})"
            ).fetchone()[0]
    finally:
        api.close()
        proxy.close()
        agent.stop()
        service.stop()
    w, r = out["whole"], out["resumed"]
    failed = r["attempts"][0] if r["attempts"] else {"seconds": 0.0, "bytes_from_agent": 0}
    out["starting_over"] = {  # the failed attempt, then the whole load again
        "seconds": round(failed["seconds"] + w["seconds"], 2),
        "bytes_from_agent": failed["bytes_from_agent"] + w["bytes_from_agent"],
    }
    return out


def markdown(out: dict) -> str:
    w, r, over = out["whole"], out["resumed"], out["starting_over"]
    m = out["machine"]
    lines = [
        f"# A load killed at {100 * out['at']:.0f} % and resumed: students, {out['rows']:,} rows, SQLite",
        "",
        f"{m['date']}, commit {out.get('commit')}, {m['cpus']} CPUs ({m['cpu']}); `{out.get('command')}`. "
        f"The agent was killed once {100 * out['at']:.0f} % of the undisturbed load's bytes had crossed, and started "
        f"again in {out['agent_restart_s']:.1f} s (part of the resumed load's time, as is the retry's "
        "back-off); starting over is the failed attempt plus the undisturbed load. The undisturbed load ran "
        "first, on a fresh Spark JVM: its seconds include the JVM's warm-up, its extraction's do not.",
        "",
        "| load | s | extraction s | bytes from agent | rows received (last attempt) | rows kept from the failed attempt | rows in view |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| undisturbed | {w['seconds']} | {w['extract_s']} | {w['bytes_from_agent']:,} | {w['rows_received']:,} | – | {w['rows_in_view']:,} |",
        f"| killed, resumed | {r['seconds']} | {r['extract_s']} | {r['bytes_from_agent']:,} | {r['rows_received']:,} | "
        f"{(r['resumed_from_rows'] or 0):,} | {r['rows_in_view']:,} |",
        f"| killed, started over (estimate) | {over['seconds']} | – | {over['bytes_from_agent']:,} | – | – | – |",
        "",
        f"The source holds {out['source_rows']:,} rows of the view; the resumed load's status: {r['status']}"
        + (f" ({r['error']})" if r["error"] else "")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--at", type=float, default=0.9, help="share of the load's bytes sent when the agent is killed")
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "resumed-10m")
    args = parser.parse_args()
    machine.save(run(args), args, "tests.benchmarks.resumed", markdown)


if __name__ == "__main__":
    main()
