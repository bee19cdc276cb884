"""Run the benchmark suite: `python -m tests.benchmarks --quick | --full | --10m [options]`.

Only parses arguments and hands over to `runner.run` and `report.write`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tests.benchmarks import report, runner
from tests.benchmarks.strategies import STRATEGIES
from workloads import netns
from workloads.generators import WORKLOADS

HERE = Path(__file__).resolve().parent

#: The strategies of the service that serve any workload (timestamp needs stamps, row_version
#: PostgreSQL: the stamped profile runs them); reladiff is the external tool.
CHANGE_STAMPS = ("timestamp", "row_version")
SERVICE_STRATEGIES = [name for name, s in STRATEGIES.items() if s.kind == "view" and name not in CHANGE_STAMPS]
#: The workloads of the full run: all but the stamped one (its own profile).
FULL_WORKLOADS = [w for w in WORKLOADS if w != "students-stamped"]
#: The strategies of the large runs: the default and the baseline it must beat.
LARGE_STRATEGIES = ["full_ship", "auto"]

#: The profiles. Quick must finish in under 5 minutes on a 2-core machine, full (`make
#: bench`) in under an hour; each cut is recorded in the results' `meta.reductions`, each
#: profile's sizes and their reason in `meta.plan`.
PROFILES = {
    "full": {
        "rows": 200_000,
        "rounds": 3,
        "workloads": FULL_WORKLOADS,
        "strategies": SERVICE_STRATEGIES,
        "verify": "ends",
        "warm_up": True,
        # Measured on this 2-core machine at commit f5ce453 (a slower host than the one of
        # full-sketch.json): students at 1M on SQLite, 5 rounds of full_ship and auto, took
        # 8.5 minutes up to its no-change round (full_ship 21-29 s a sync, auto 10-12 s); with 3
        # rounds about 7 minutes, PostgreSQL about 9 (its copy and replays). Each other workload
        # at 200k, six strategies, 3 rounds: 30 syncs of 3-12 s and its generation and oracle,
        # 3-6 minutes. About 35-45 minutes in all; with 5 rounds, about 55-70.
        "rows_by_workload": {"students": 1_000_000},
        "strategies_by_workload": {"students": LARGE_STRATEGIES},
        "sources_by_workload": {"students": ["sqlite", "postgres"]},
        "plan": "students at 1,000,000 rows with full_ship and auto, on SQLite and on PostgreSQL (students@postgres); "
        "recent-hot, churn, churn-50, wide and narrow at 200,000 rows with the six strategies of the service; "
        "3 rounds after the load and the no-change round (5 would take 55-70 minutes on a slow host); "
        "estimated at 35-45 minutes on 2 cores (an hour at most)",
        "reductions": {
            "strategies": "reladiff not run (its PostgreSQL copies and ~10 s syncs would push the run past an hour; "
            "it was measured at 1M rows in results/full.json; run --full --strategies "
            + ",".join(STRATEGIES)
            + " for every strategy on every workload)",
        },
    },
    "10m": {
        "rows": 10_000_000,
        "rounds": 3,
        "workloads": ["students"],
        "strategies": ["auto", "full_ship"],
        "verify": "ends",
        "warm_up": True,
        "plan": "students at 10,000,000 rows on SQLite, auto and full_ship, 3 rounds after the load and the no-change round; "
        "agent peak RSS per sync and the service's (its process and Spark JVM) sampled over the run; "
        "estimated at 45-75 minutes on 2 cores",
        "reductions": {},
    },
    "stamped": {
        "rows": 1_000_000,
        "rounds": 3,
        "workloads": ["students-stamped", "students"],
        "strategies": ["timestamp", "auto", "full_ship"],
        "verify": "ends",
        "warm_up": True,
        "strategies_by_workload": {"students": ["row_version", "full_ship"]},
        "sources_by_workload": {"students-stamped": ["sqlite", "postgres"], "students": ["postgres"]},
        "plan": "students-stamped (an indexed updated_at, a soft-delete flag) at 1,000,000 rows with timestamp, auto "
        "and full_ship on SQLite and PostgreSQL; students at 1,000,000 rows on PostgreSQL with row_version and "
        "full_ship; 3 rounds after the load and the no-change round; estimated at 30-40 minutes on 2 cores",
        "reductions": {},
    },
    "quick": {
        "rows": 200_000,
        "rounds": 5,
        # One workload: each costs (rounds + 1) x strategies syncs of 4-14 s at 200k rows here,
        # so students alone takes about 4 minutes and all six would take over 20; the
        # no-change round adds one more sync per strategy.
        "workloads": ["students"],
        # reladiff needs a PostgreSQL copy of the source, kept in step every round: ~40 s.
        # Each strategy costs about 50 s at 200k rows here; six would not fit in 5 minutes.
        "strategies": ["full_ship", "group_hash", "sketch", "auto"],
        # Comparing all rows of every view every round cost another ~50 s at 200k rows; on
        # the load too, ~17 s (the load's delta and counts are still checked).
        "verify": "last",
        # Warming the JVM up costs ~30 s; only the first strategy's load and first rounds are
        # slower without it, and the table is the median of the last rounds.
        "warm_up": False,
        "rows_by_workload": {},
        "plan": "students at 200,000 rows with full_ship, group_hash, sketch and auto, 5 rounds; under 5 minutes on 2 cores",
        # Each cut is keyed by the option that undoes it.
        "reductions": {
            "workloads": "workloads: students only (all six would take over 20 minutes on a 2-core machine; run --quick --workloads NAME for another)",
            "verify": "verification: all rows of each view compared with the source on the last round; the load and the rounds between are checked through their deltas and counts",
            "warm_up": "no warm-up sync: the first strategy's load and first rounds include the JVM's warming up (the steady-state table is unaffected)",
            "strategies": "strategies: full_ship, group_hash, sketch and auto only (tuple_hash and range_checksum "
            "cost ~50 s each, reladiff's PostgreSQL copies ~40 s; run --quick --strategies "
            + ",".join(STRATEGIES)
            + " for all)",
        },
    },
}


def _names(text: str, known: dict, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.benchmarks",
        description="Bytes on the wire and time per sync, per strategy and workload, against the lower bound.",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--replot", type=Path, metavar="JSON", help="only rewrite the plots and the table of an existing results file"
    )
    mode.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="join results files of the same settings but different workloads (runs split over several sittings) into --out, with their plots and table",
    )
    mode.add_argument(
        "--quick",
        action="store_const",
        dest="profile",
        const="quick",
        help="reduced run, under 5 minutes (200k rows, 5 rounds)",
    )
    mode.add_argument(
        "--full",
        action="store_const",
        dest="profile",
        const="full",
        help="the full run, under an hour: students at 1M rows on SQLite and PostgreSQL (full_ship, auto), the other workloads at 200k (six strategies), 3 rounds",
    )
    mode.add_argument(
        "--10m",
        action="store_const",
        dest="profile",
        const="10m",
        help="students at 10M rows, auto and full_ship, 3 rounds, with the service's memory (about an hour)",
    )
    mode.add_argument(
        "--stamped",
        action="store_const",
        dest="profile",
        const="stamped",
        help="change stamps at 1M rows: timestamp on students-stamped (SQLite, PostgreSQL) and row_version on students (PostgreSQL), beside auto and full_ship",
    )
    mode.add_argument(
        "--breakdown",
        type=Path,
        metavar="JSON",
        help="print the time breakdown table of an existing results file (Markdown, for the README)",
    )
    p.add_argument(
        "--rows",
        type=int,
        help="rows per workload's source table (default: full 1,000,000 students and 200,000 the others; 200,000 quick; 10,000,000 10m)",
    )
    p.add_argument("--rounds", type=int, help="sync rounds after the initial load (default: 3 full and 10m, 5 quick)")
    p.add_argument(
        "--workloads",
        type=lambda t: _names(t, WORKLOADS, "workload"),
        help=f"comma-separated, of: {', '.join(WORKLOADS)} (default: all)",
    )
    p.add_argument(
        "--strategies",
        type=lambda t: _names(t, STRATEGIES, "strategy"),
        help=f"comma-separated, of: {', '.join(STRATEGIES)}, for every workload (default: the profile's; those not available are skipped and listed)",
    )
    p.add_argument(
        "--source",
        choices=runner.SOURCES,
        help="the engine the agent reads, for every workload: the simulator's SQLite file, or a PostgreSQL or MariaDB server the benchmark starts and keeps in step "
        "(default: sqlite; full also runs students on postgres)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="results JSON (default: tests/benchmarks/results/<quick|full>.json); plots and table go beside it",
    )
    p.add_argument(
        "--verify",
        choices=("every", "ends", "last"),
        help="check all rows of every view every round, on the load and last round, or on the last round only (default: ends full, last quick); the other rounds, and the no-change round unless 'every', are checked through their deltas and counts",
    )
    p.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        help="sync a small view twice before measuring, so the JVM is warm (default: on full, off quick)",
    )
    p.add_argument(
        "--quiet-round",
        dest="no_change_round",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the no-change round: after the last round, sync every strategy once more with nothing changed at the source (its delta must be empty), "
        "recorded apart from the rounds and shown in the table's 'no-change round' column, never in the steady state (default: on)",
    )
    p.add_argument("--seed", type=int, default=7, help="seed of the generators and change simulators")
    p.add_argument(
        "--link-mbit",
        type=float,
        metavar="N",
        help="run each workload's agent on its own network namespace behind a veth link limited to N Mbit/s by tc tbf (needs root), so wall time includes the link",
    )
    p.add_argument(
        "--work-dir", type=Path, default=HERE / "work", help="scratch space for sources and the warehouse (wiped first)"
    )
    p.add_argument(
        "--keep-work", action="store_true", help="keep the scratch space (sources, warehouse, logs) afterwards"
    )
    args = p.parse_args(argv)
    if args.merge and not args.out:
        p.error("--merge needs --out, the joined results file")
    if args.rows is not None and args.rows < 1:
        p.error("--rows must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.link_mbit is not None:
        if args.link_mbit <= 0:
            p.error("--link-mbit must be a positive rate in Mbit/s")
        ok, why = netns.available()
        if not ok:
            p.error(f"--link-mbit {args.link_mbit:g}: {why}")
        if args.source in runner.SERVERS or (args.profile == "full" and args.source is None):
            p.error(
                "--link-mbit needs --source sqlite: a PostgreSQL or MariaDB source listens on loopback, out of the link's namespace"
            )
    return args


def config_from(args: argparse.Namespace) -> runner.RunConfig:
    profile = PROFILES[args.profile]
    overridden = {
        option
        for option in ("rows", "workloads", "strategies", "verify", "warm_up", "source")
        if getattr(args, option) is not None
    }
    reductions = [text for option, text in profile["reductions"].items() if option not in overridden]

    def per_workload(option: str, key: str) -> dict:
        """The profile's per-workload setting, unless an explicit option applies to every workload."""
        return {} if option in overridden else dict(profile.get(key, {}))

    return runner.RunConfig(
        name=(args.out.stem if args.out else args.profile),
        rows=args.rows or profile["rows"],
        rounds=args.rounds or profile["rounds"],
        workloads=args.workloads or profile["workloads"],
        strategies=args.strategies or profile["strategies"],
        verify=args.verify or profile["verify"],
        warm_up=profile["warm_up"] if args.warm_up is None else args.warm_up,
        work_dir=args.work_dir / (args.out.stem if args.out else args.profile),
        seed=args.seed,
        keep_work=args.keep_work,
        rows_by_workload=per_workload("rows", "rows_by_workload"),
        strategies_by_workload=per_workload("strategies", "strategies_by_workload"),
        sources_by_workload=per_workload("source", "sources_by_workload"),
        source=args.source or "sqlite",
        reductions=reductions,
        link_mbit=args.link_mbit,
        no_change_round=args.no_change_round,
        # a sitting of some workloads still follows the profile's plan
        plan=profile["plan"] if not overridden - {"verify", "warm_up", "workloads"} else None,
    )


#: Settings that must agree for results of separate runs to form one table.
MERGE_SAME = ("rounds", "seed", "strategies", "verify", "link_mbit", "cpus")


def merge(parts: list[dict], name: str = "merged") -> dict:
    """One results document from runs of disjoint workloads with the same settings.

    `meta.parts` keeps each run's own commit, date, machine load and duration, so a table
    joined from sittings on different commits says so; the joined run is called `name`, and
    its own date and commit are those of the latest sitting.
    """
    first = parts[0]["meta"]
    seen: set[str] = set()
    for part in parts:
        meta = part["meta"]
        differ = [k for k in MERGE_SAME if meta.get(k) != first.get(k)]
        if differ:
            raise ValueError(f"run {meta.get('name')!r} differs from {first.get('name')!r} in {', '.join(differ)}")
        twice = seen & set(part["workloads"])
        if twice:
            raise ValueError(f"workload(s) {', '.join(sorted(twice))} appear in more than one run")
        seen |= set(part["workloads"])
    latest = max((part["meta"] for part in parts), key=lambda m: m["date"])
    keep = (
        "name",
        "date",
        "git_commit",
        "git_dirty",
        "load_avg_at_start",
        "warm_up_s",
        "elapsed_s",
        "workloads",
        "rows_by_workload",
        "no_change_round",
        "source",
        "plan",
        "service_peak_rss_kb",
    )
    meta = {
        **first,
        "name": name,
        "date": latest["date"],
        "git_commit": latest.get("git_commit"),
        "git_dirty": any(part["meta"].get("git_dirty") for part in parts),
        "workloads": [w for part in parts for w in part["meta"]["workloads"]],
        "rows_by_workload": {w: n for part in parts for w, n in part["meta"]["rows_by_workload"].items()},
        # results from before the PostgreSQL source ran every workload on SQLite
        "source": runner.source_label(s for part in parts for s in (part["meta"].get("source") or "sqlite").split("+")),
        "legs": {k: leg for part in parts for k, leg in (part["meta"].get("legs") or {}).items()},
        "service_peak_rss_kb": max(
            (part["meta"]["service_peak_rss_kb"] for part in parts if part["meta"].get("service_peak_rss_kb")),
            default=None,
        ),
        "elapsed_s": round(sum(part["meta"].get("elapsed_s", 0) for part in parts), 1),
        "parts": [{k: part["meta"].get(k) for k in keep} for part in parts],
    }
    return {"meta": meta, "workloads": {w: r for part in parts for w, r in part["workloads"].items()}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.breakdown:
        results = json.loads(args.breakdown.read_text())
        print(report.time_table(results, report.time_breakdown(results)))
        return 0
    if args.replot:
        written = report.write(json.loads(args.replot.read_text()), args.replot)
        print("wrote " + ", ".join(str(p) for p in written.values()))
        return 0
    if args.merge:
        try:
            results = merge([json.loads(path.read_text()) for path in args.merge], name=args.out.stem)
        except ValueError as exc:
            print(f"cannot merge: {exc}", file=sys.stderr)
            return 2
        written = report.write(results, args.out)
        print("wrote " + ", ".join(str(p) for p in written.values()))
        return 0
    config = config_from(args)
    out = args.out or HERE / "results" / f"{args.profile}.json"
    started = time.perf_counter()
    results = runner.run(config, log=lambda line: print(line, flush=True))
    written = report.write(results, out)
    print()
    print(written["md"].read_text())
    print(
        "wrote "
        + ", ".join(str(p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd()) else p) for p in written.values())
    )
    print(f"benchmark '{config.name}' took {(time.perf_counter() - started) / 60:.1f} min")
    broken = [f"{w}/{s}" for w, ws in results["summary"].items() for s, t in ws["strategies"].items() if not t["exact"]]
    broken += [f"{w}: {r['error']}" for w, r in results["workloads"].items() if r.get("error")]
    if broken:
        print("NOT EXACT or failed: " + ", ".join(broken))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
