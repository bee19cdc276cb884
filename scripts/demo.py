"""The demo: a legacy SQLite database of students kept in step with a warehouse view.

Starts the agent and the service as separate processes, registers the source and a view,
and runs sync rounds while the legacy application changes the data in between. A second
view over the same query uses the full-ship strategy, so each round shows what shipping
the whole site query would have cost on the same data.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workloads.harness import Api, start_agent, start_service  # noqa: E402
from workloads.students import COLUMNS, StudentsSource  # noqa: E402

VIEW_SQL = (
    "SELECT s.student_id, s.first_name, s.middle_name, s.last_name, s.title, s.birth_date, s.country, "
    "s.phone, s.address, s.mailing_address, s.enrolled, s.gpa FROM campus.students s WHERE s.active = 1"
)
TOKEN = "demo-token"


def kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def source_truth(db: Path) -> dict:
    """The view evaluated straight on the legacy database."""
    cols = COLUMNS[:-1]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM students WHERE active = 1").fetchall()
    truth = {}
    for row in rows:
        rec = dict(zip(cols, row))
        rec["gpa"] = None if rec["gpa"] is None else str(Decimal(repr(rec["gpa"])).quantize(Decimal("0.01")))
        truth[rec["student_id"]] = rec
    return truth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="students in the legacy table")
    parser.add_argument("--rounds", type=int, default=10, help="sync rounds after the initial load")
    parser.add_argument("--dir", type=Path, default=ROOT / "demo-data", help="where the demo keeps its files (wiped first)")
    args = parser.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    db = args.dir / "legacy.db"
    print(f"creating the legacy database {db} with {args.rows:,} students ...", flush=True)
    legacy = StudentsSource(db)
    legacy.create(args.rows)

    agent = service = None
    try:
        agent = start_agent(f"sqlite:///{db}", args.dir, token=TOKEN, allow=["students"])
        print(f"agent   up at {agent.url} (read-only, token required)", flush=True)
        print("service starting (Spark takes a few seconds) ...", flush=True)
        service = start_service(args.dir / "warehouse", args.dir)
        print(f"service up at {service.url}", flush=True)
        api = Api(service.url)
        api.add_source("campus", agent.url, TOKEN)
        view = api.add_view("active_students", VIEW_SQL)
        api.add_view("active_students_fullship", VIEW_SQL, strategy="full_ship")
        print(f"view active_students: key {view['key']}, site query:\n  {view['sites'][0]['sql']}\n", flush=True)

        header = f"{'round':>5}  {'ins':>5} {'upd':>5} {'del':>5}   {'groups sent/ident/chg/regr':>27}  {'bytes (group hash)':>18}  {'bytes (full ship)':>17}  {'ratio':>6}  {'time':>6}"
        print(header)
        print("-" * len(header))
        totals = [0, 0]
        for rnd in range(args.rounds + 1):
            if rnd > 0:
                legacy.change()
            t0 = time.monotonic()
            s = api.sync("active_students")
            elapsed = time.monotonic() - t0
            f = api.sync("active_students_fullship")
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
            print(f"{label:>5}  {m['rows_inserted']:>5} {m['rows_updated']:>5} {m['rows_deleted']:>5}   {groups:>27}  {kib(ours):>18}  {kib(full):>17}  {ours / full:>6.1%}  {elapsed:>5.1f}s", flush=True)
        print("-" * len(header))
        print(f"after the load: {kib(totals[0])} moved by the group-hash method versus {kib(totals[1])} by shipping the site query whole ({totals[0] / totals[1]:.1%}).")

        rows = {r["student_id"]: r for r in api.rows("active_students")}
        truth = source_truth(db)
        if rows == truth:
            print(f"check: the view equals the legacy source ({len(rows):,} rows) — OK")
            return 0
        missing = truth.keys() - rows.keys()
        extra = rows.keys() - truth.keys()
        differ = [k for k in truth.keys() & rows.keys() if truth[k] != rows[k]]
        print(f"check FAILED: {len(missing)} missing, {len(extra)} extra, {len(differ)} different rows")
        for k in list(differ)[:3]:
            print("  view:  ", rows[k], "\n  source:", truth[k])
        return 1
    finally:
        if service:
            service.stop()
        if agent:
            agent.stop()


if __name__ == "__main__":
    sys.exit(main())
