"""The demo: a legacy SQLite database of students kept in step with a warehouse view.

Starts the agent and the service as separate processes, registers the source and a view,
and runs sync rounds while the legacy application changes the data in between. The view
names the group-hash strategy (the paper's method, whose groups each round prints; a new
view that names none gets auto). A second view over the same query uses the full-ship
strategy, so each round shows what shipping the whole site query would have cost on the
same data. With --serve, the agent and the service stay up after the rounds, for the
`deltasieve` command (the API's command-line client) to try on them.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import sqlite3
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workloads.harness import Api, free_port, start_agent, start_service  # noqa: E402
from workloads.students import COLUMNS, EnrolmentsSource, StudentsSource  # noqa: E402

VIEW_SQL = (
    "SELECT s.student_id, s.first_name, s.middle_name, s.last_name, s.title, s.birth_date, s.country, "
    "s.phone, s.address, s.mailing_address, s.enrolled, s.gpa FROM campus.students s WHERE s.active = 1"
)
#: The two-source scenario: students in one legacy system, enrolments in another.
JOIN_SQL = (
    "SELECT s.student_id, s.first_name, s.last_name, s.phone, e.student_id AS enrolled_id, e.course, e.term, e.grade "
    "FROM campus.students s JOIN registry.enrolments e ON e.student_id = s.student_id "
    "WHERE s.active = 1 AND e.term >= '2025'"
)
TOKEN = "demo-token"
#: The service's environment variable the sources' token is read from (docs/operations/security.md).
TOKEN_VARIABLE = "DEMO_AGENT_TOKEN"
#: The service's port with --serve: the `deltasieve` command's default URL points there.
SERVE_PORT = 8000


def kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def students_truth(db: Path) -> dict:
    """The students view evaluated straight on the legacy database."""
    cols = COLUMNS[:-1]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM students WHERE active = 1").fetchall()
    truth = {}
    for row in rows:
        rec = dict(zip(cols, row))
        rec["gpa"] = None if rec["gpa"] is None else str(Decimal(repr(rec["gpa"])).quantize(Decimal("0.01")))
        truth[(rec["student_id"],)] = rec
    return truth


def join_truth(students_db: Path, enrolments_db: Path) -> dict:
    """The two-source view evaluated over both legacy databases at once (ATTACH)."""
    with sqlite3.connect(f"file:{students_db}?mode=ro", uri=True) as conn:
        conn.execute("ATTACH DATABASE ? AS registry", (f"file:{enrolments_db}?mode=ro",))
        cur = conn.execute(
            "SELECT s.student_id, s.first_name, s.last_name, s.phone, e.student_id AS enrolled_id, e.course, e.term, e.grade FROM students s "
            "JOIN registry.enrolments e ON e.student_id = s.student_id WHERE s.active = 1 AND e.term >= '2025'"
        )
        names = [d[0] for d in cur.description]
        return {(r[0], r[4], r[5], r[6]): dict(zip(names, r)) for r in cur.fetchall()}


def check(api: Api, name: str, key: list[str], expected: dict) -> int:
    """Compare the view with the truth read from the source(s); 0 when they are equal."""
    rows = {tuple(r[k] for k in key): r for r in api.rows(name)}
    if rows == expected:
        print(f"check: the view equals the view definition evaluated on the legacy source(s) ({len(rows):,} rows) — OK")
        return 0
    missing = expected.keys() - rows.keys()
    extra = rows.keys() - expected.keys()
    differ = [k for k in expected.keys() & rows.keys() if expected[k] != rows[k]]
    print(f"check FAILED: {len(missing)} missing, {len(extra)} extra, {len(differ)} different rows")
    for k in list(differ)[:3]:
        print("  view:  ", rows[k], "\n  source:", expected[k])
    return 1


def read_delta_table(api: Api, name: str, key: list[str], sync_id: str) -> int:
    """Read the view's Delta table with deltalake and pandas (not deltasieve's code) once it
    holds sync `sync_id`, and compare it with the view's rows from the API."""
    import io

    import pandas as pd
    from deltalake import DeltaTable

    deadline = time.monotonic() + 120
    while True:
        (destination,) = api.http.get(f"/v1/views/{name}").json()["destinations"]
        if destination["applied_sync"] == sync_id and destination["lag_syncs"] == 0:
            break
        if time.monotonic() > deadline:
            print(f"the Delta table did not catch up: {destination}")
            return 1
        time.sleep(0.2)
    table = DeltaTable(destination["uri"])
    delta = table.to_pandas().sort_values(key).reset_index(drop=True)
    r = api.http.get(f"/v1/views/{name}/rows", params={"format": "parquet"})
    r.raise_for_status()
    rows = pd.read_parquet(io.BytesIO(r.content)).sort_values(key).reset_index(drop=True)
    commits = sum(1 for c in table.history() if "deltasieve.sync_id" in c)
    print(f"\nDelta table {destination['uri']}: {len(delta):,} rows, {commits} commits carrying a sync id")
    if delta[list(rows.columns)].equals(rows):
        print("check: the Delta table, read with deltalake and pandas, equals the view — OK")
        return 0
    print("check FAILED: the Delta table differs from the view")
    return 1


def serve_port() -> int:
    """SERVE_PORT when it is free, else any free port."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", SERVE_PORT))
        except OSError:
            return free_port()
    return SERVE_PORT


def serve(url: str, name: str) -> None:
    """Keep the processes up and show what to try with the `deltasieve` command, until Ctrl-C or SIGTERM."""
    env = "" if url == f"http://127.0.0.1:{SERVE_PORT}" else f"export DELTASIEVE_URL={url}\n  "
    print(
        f"\nthe service stays up at {url}; try the command-line client in another shell:\n"
        f"  {env}.venv/bin/deltasieve view list\n"
        f"  .venv/bin/deltasieve syncs {name}\n"
        f"  .venv/bin/deltasieve sync {name}                 # a live progress bar, then the summary\n"
        f"  .venv/bin/deltasieve delta {name} --format csv -o delta.csv\n"
        f"  .venv/bin/deltasieve rows {name} | head -3\n"
        f"  .venv/bin/deltasieve stats {name}\n"
        "Ctrl-C stops the service and the agent.",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="students in the legacy table")
    parser.add_argument("--rounds", type=int, default=10, help="sync rounds after the initial load")
    parser.add_argument(
        "--scenario",
        choices=["students", "two-sources"],
        default="students",
        help="one legacy table, or students joined with a second system's enrolments",
    )
    parser.add_argument(
        "--dir", type=Path, default=ROOT / "demo-data", help="where the demo keeps its files (wiped first)"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help=f"after the rounds, keep the agent and the service (on port {SERVE_PORT} when free) running for the "
        "deltasieve command, until Ctrl-C",
    )
    args = parser.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    db = args.dir / "legacy.db"
    print(f"creating the legacy database {db} with {args.rows:,} students ...", flush=True)
    legacy = StudentsSource(db)
    legacy.create(args.rows)
    changers = [legacy]
    if args.scenario == "two-sources":
        registry_db = args.dir / "registry.db"
        registry = EnrolmentsSource(registry_db, legacy)
        registry.create()
        changers.append(registry)
        print(f"creating the second legacy database {registry_db} (enrolments) ...", flush=True)

    agents = []
    service = None
    try:
        agents.append(start_agent(f"sqlite:///{db}", args.dir, token=TOKEN, allow=["students"]))
        print(f"agent   up at {agents[0].url} (students; read-only, token required)", flush=True)
        if args.scenario == "two-sources":
            agents.append(start_agent(f"sqlite:///{registry_db}", args.dir, token=TOKEN, allow=["enrolments"]))
            print(f"agent   up at {agents[1].url} (enrolments; read-only, token required)", flush=True)
        print("service starting (Spark takes a few seconds) ...", flush=True)
        # the service reads the agents' token from its environment: the catalog keeps only "env:DEMO_AGENT_TOKEN"
        service = start_service(
            args.dir / "warehouse", args.dir, port=serve_port() if args.serve else None, env={TOKEN_VARIABLE: TOKEN}
        )
        print(f"service up at {service.url}", flush=True)
        api = Api(service.url)
        api.add_source("campus", agents[0].url, f"env:{TOKEN_VARIABLE}")
        if args.scenario == "two-sources":
            api.add_source("registry", agents[1].url, f"env:{TOKEN_VARIABLE}")
            name, sql = "current_enrolments", JOIN_SQL
            truth = lambda: join_truth(db, registry_db)  # noqa: E731
        else:
            name, sql = "active_students", VIEW_SQL
            truth = lambda: students_truth(db)  # noqa: E731
        view = api.add_view(name, sql, strategy="group_hash")  # named: a view that names none gets auto
        api.add_view(f"{name}_fullship", sql, strategy="full_ship")
        print(f"view {name}: key {view['key']}, strategy {view['strategy']}, site queries:")
        for site in view["sites"]:
            print(f"  [{site['source']}] {site['sql']}")
        print(flush=True)

        header = f"{'round':>5}  {'ins':>5} {'upd':>5} {'del':>5}   {'groups sent/ident/chg/regr':>27}  {'bytes (group hash)':>18}  {'bytes (full ship)':>17}  {'ratio':>6}  {'time':>6}"
        print(header)
        print("-" * len(header))
        totals = [0, 0]
        for rnd in range(args.rounds + 1):
            if rnd > 0:
                for changer in changers:
                    changer.change()
            t0 = time.monotonic()
            s = api.sync(name)
            elapsed = time.monotonic() - t0
            f = api.sync(f"{name}_fullship")
            for sync in (s, f):
                if sync["status"] != "succeeded":
                    print(f"sync failed: {sync['error']}")
                    return 1
            m, fm = s["metrics"], f["metrics"]
            ours = m["bytes_to_agent"] + m["bytes_from_agent"]
            full = fm["bytes_to_agent"] + fm["bytes_from_agent"]
            if rnd > 0:
                totals[0] += ours
                totals[1] += full
            groups = f"{m['groups_sent']}/{m['groups_identical']}/{m['groups_changed']}/{m['groups_regrouped']}"
            label = "load" if rnd == 0 else str(rnd)
            print(
                f"{label:>5}  {m['rows_inserted']:>5} {m['rows_updated']:>5} {m['rows_deleted']:>5}   {groups:>27}  {kib(ours):>18}  {kib(full):>17}  {ours / full:>6.1%}  {elapsed:>5.1f}s",
                flush=True,
            )
        print("-" * len(header))
        print(
            f"after the load: {kib(totals[0])} moved by the group-hash method versus {kib(totals[1])} by shipping the site queries whole ({totals[0] / totals[1]:.1%})."
        )

        status = check(api, name, view["key"], truth())
        status = status or read_delta_table(api, name, view["key"], s["id"])
        if args.serve:
            serve(service.url, name)
        else:
            print(
                "\nnext: the same with --serve keeps the service up for the command-line client, "
                f"e.g. `.venv/bin/deltasieve syncs {name}` (README, Command line)"
            )
        return status
    finally:
        if service:
            service.stop()
        for agent in agents:
            agent.stop()


if __name__ == "__main__":
    sys.exit(main())
