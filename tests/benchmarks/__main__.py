"""Run the benchmark suite: `python -m tests.benchmarks --quick | --full [options]`.

Only parses arguments and hands over to `runner.run` and `report.write`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from workloads import netns
from workloads.generators import WORKLOADS

from . import report, runner
from .strategies import STRATEGIES

HERE = Path(__file__).resolve().parent

#: The two profiles of the issue. Quick must finish in under 5 minutes on a 2-core
#: machine; each of its cuts is recorded in the results' `meta.reductions`.
PROFILES = {
    "full": {
        "rows": 1_000_000,
        "rounds": 10,
        "workloads": list(WORKLOADS),
        "strategies": list(STRATEGIES),
        "verify": "ends",
        "warm_up": True,
        "rows_by_workload": {},
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
        "--full", action="store_const", dest="profile", const="full", help="the full run (1M rows, 10 rounds)"
    )
    p.add_argument("--rows", type=int, help="rows per workload's source table (default: 1,000,000 full, 200,000 quick)")
    p.add_argument("--rounds", type=int, help="sync rounds after the initial load (default: 10 full, 5 quick)")
    p.add_argument(
        "--workloads",
        type=lambda t: _names(t, WORKLOADS, "workload"),
        help=f"comma-separated, of: {', '.join(WORKLOADS)} (default: all)",
    )
    p.add_argument(
        "--strategies",
        type=lambda t: _names(t, STRATEGIES, "strategy"),
        help=f"comma-separated, of: {', '.join(STRATEGIES)} (default: all on full, all but reladiff on quick; those not available are skipped and listed)",
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
    return args


def config_from(args: argparse.Namespace) -> runner.RunConfig:
    profile = PROFILES[args.profile]
    overridden = {
        option
        for option in ("rows", "workloads", "strategies", "verify", "warm_up")
        if getattr(args, option) is not None
    }
    reductions = [text for option, text in profile["reductions"].items() if option not in overridden]
    # an explicit --rows applies to every workload
    rows_by_workload = {} if args.rows is not None else dict(profile["rows_by_workload"])
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
        rows_by_workload=rows_by_workload,
        reductions=reductions,
        link_mbit=args.link_mbit,
        no_change_round=args.no_change_round,
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
    )
    meta = {
        **first,
        "name": name,
        "date": latest["date"],
        "git_commit": latest.get("git_commit"),
        "git_dirty": any(part["meta"].get("git_dirty") for part in parts),
        "workloads": [w for part in parts for w in part["meta"]["workloads"]],
        "rows_by_workload": {w: n for part in parts for w, n in part["meta"]["rows_by_workload"].items()},
        "elapsed_s": round(sum(part["meta"].get("elapsed_s", 0) for part in parts), 1),
        "parts": [{k: part["meta"].get(k) for k in keep} for part in parts],
    }
    return {"meta": meta, "workloads": {w: r for part in parts for w, r in part["workloads"].items()}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
