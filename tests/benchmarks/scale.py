"""Scale projection (#39): the default strategy on students at several sizes, each phase's cost per row.

    python -m tests.benchmarks.scale run [--rows 1000000,3000000,10000000] [--sources sqlite,postgres]
    python -m tests.benchmarks.scale report

`run` is one sitting per (source, rows): `python -m tests.benchmarks --full` on the students
workload with the default strategy alone, its results in DIR/SOURCE-ROWS.json (and .md). A
sitting whose file exists is kept, so a run stopped part way goes on where it stopped, and a
long projection can be spread over several sessions (`--redo` runs them anew). Every sitting
runs from one commit: `report` refuses files of different commits unless told otherwise,
because a per-row cost compared across commits measures the commits, not the scale.

`report` reads the sittings and writes SCALE.json and .md: per sitting the steady sync's
seconds per million rows in each phase (the agent's read, convert, hash and lookup; the
warehouse's build_fragments), the floor's, the load's, the agent's and the service's peak
memory; per source the largest sitting's per-row cost over the smallest's (flat is 1.0), and
a straight-line fit of each measure over the sizes, evaluated at 100M rows: the disk (the
source file, and the view's store taken as the load's compressed bytes, twice over while a
version is staged), the memory and the hours a 100M run would take on the machine that ran
the sittings, and whether that fits.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.benchmarks import machine, report

HERE = Path(__file__).resolve().parent
DIR = HERE / "results" / "scale"
OUT = HERE / "results" / "scale.json"
ROWS = (1_000_000, 3_000_000, 10_000_000)
SOURCES = ("sqlite", "postgres")
TARGET_ROWS = 100_000_000
#: per-row measures of a sitting: name, where its seconds are in the time breakdown
PHASES = {
    "sync": lambda t: t.get("wall_s"),
    "agent read": lambda t: (t.get("agent_timings") or {}).get("read_s"),
    "agent convert": lambda t: (t.get("agent_timings") or {}).get("convert_s"),
    "agent hash": lambda t: (t.get("agent_timings") or {}).get("hash_s"),
    "agent lookup": lambda t: (t.get("agent_timings") or {}).get("lookup_s"),
    "exchange": lambda t: (t.get("site_phases") or {}).get("exchange_units"),
    "build_fragments": lambda t: (t.get("phases") or {}).get("build_fragments"),
    "floor": lambda t: (t.get("floor") or {}).get("seconds"),
}


def sitting_name(source: str, rows: int) -> str:
    """The file stem of one sitting.

    >>> sitting_name("postgres", 3_000_000)
    'postgres-3m'
    >>> sitting_name("sqlite", 250_000)
    'sqlite-250k'
    """
    if rows % 1_000_000 == 0:
        return f"{source}-{rows // 1_000_000}m"
    return f"{source}-{rows // 1_000}k" if rows % 1_000 == 0 else f"{source}-{rows}"


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of ys over xs; None with fewer than two distinct xs.

    >>> fit_line([1, 2, 3], [3, 5, 7])
    (1.0, 2.0)
    >>> fit_line([5, 5], [1, 2]) is None
    True
    """
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return round(my - slope * mx, 9), round(slope, 9)


def at(line: tuple[float, float] | None, x: float) -> float | None:
    """The fitted line's value at x (None without a line).

    >>> at((1.0, 2.0), 10)
    21.0
    """
    return None if line is None else line[0] + line[1] * x


def per_million(seconds: float | None, rows: int) -> float | None:
    """Seconds per million rows of the view.

    >>> per_million(4.5, 3_000_000)
    1.5
    """
    return None if seconds is None else round(seconds / rows * 1e6, 4)


def sittings(results: dict) -> list[dict]:
    """A row per workload of one results file: its size, per-phase seconds per million rows, load, memory, disk."""
    meta, out = results["meta"], []
    for wname, w in results["workloads"].items():
        rows = meta["rows_by_workload"][wname]
        for strategy in w["strategies"]:
            times = report.time_breakdown(results)[wname][strategy]
            summary = results["summary"][wname]["strategies"][strategy]
            row = {"source": w.get("source") or meta["source"], "rows": rows, "strategy": strategy}
            row |= {f"{name} s/M rows": per_million(pick(times), rows) for name, pick in PHASES.items()}
            row |= {
                "x floor": round(times["x_floor"], 2) if times.get("x_floor") else None,
                "load s/M rows": per_million(summary.get("load_wall_s"), rows),
                "load bytes/row": round(summary["load_bytes"] / rows, 1) if summary.get("load_bytes") else None,
                "source bytes/row": round(w["source_bytes"] / rows, 1) if w.get("source_bytes") else None,
                "generate s/M rows": per_million(w.get("generate_s"), rows),
                "agent peak MiB": round(summary["agent_peak_rss_kb"] / 1024)
                if summary.get("agent_peak_rss_kb")
                else None,
                "service peak MiB": round(w["service_peak_rss_kb"] / 1024) if w.get("service_peak_rss_kb") else None,
                "rounds": meta["rounds"],
                "commit": (meta.get("git_commit") or "")[:10],
            }
            out.append(row)
    return out


def projection(
    rows: list[dict], target: int = TARGET_ROWS, disk_free: int | None = None, memory: int | None = None
) -> dict:
    """For one source's sittings: flatness (largest over smallest per-row cost) and the 100M figures.

    >>> p = projection([
    ...     {"rows": 10, "sync s/M rows": 2.0, "load s/M rows": 1.0, "generate s/M rows": 1.0,
    ...      "source bytes/row": 100, "load bytes/row": 50, "agent peak MiB": 100, "service peak MiB": 1000, "rounds": 2},
    ...     {"rows": 20, "sync s/M rows": 2.0, "load s/M rows": 1.0, "generate s/M rows": 1.0,
    ...      "source bytes/row": 100, "load bytes/row": 50, "agent peak MiB": 120, "service peak MiB": 1200, "rounds": 2}],
    ...     target=40, disk_free=10**9, memory=2000 * 2**20)
    >>> p["flat"]["sync s/M rows"], p["agent peak MiB"], p["service peak MiB"], p["fits"]
    (1.0, 160.0, 1600.0, True)
    """
    rows = sorted(rows, key=lambda r: r["rows"])
    small, large = rows[0], rows[-1]
    flat = {
        k: round(large[k] / small[k], 2)
        for k in small
        if k.endswith("s/M rows") and small[k] and large.get(k) is not None and len(rows) > 1
    }
    xs = [r["rows"] for r in rows]

    def fitted(key: str) -> float | None:
        return at(fit_line(xs, [r.get(key) for r in rows]), target)

    def per_row(key: str) -> float | None:
        """A per-row measure at the largest size (a per-row cost is already the slope)."""
        return large.get(key)

    sync_s = (per_row("sync s/M rows") or 0) * target / 1e6
    load_s = (per_row("load s/M rows") or 0) * target / 1e6
    generate_s = (per_row("generate s/M rows") or 0) * target / 1e6
    disk = ((per_row("source bytes/row") or 0) + 2 * (per_row("load bytes/row") or 0)) * target
    agent, service = fitted("agent peak MiB"), fitted("service peak MiB")
    hours = (generate_s + load_s + large["rounds"] * sync_s) / 3600
    out = {
        "sizes": xs,
        "flat": flat,
        "target rows": target,
        "steady sync s": round(sync_s, 1),
        "load s": round(load_s, 1),
        "hours": round(hours, 2),
        "disk GB": round(disk / 1e9, 1),
        "agent peak MiB": None if agent is None else round(agent, 1),
        "service peak MiB": None if service is None else round(service, 1),
    }
    out["fits"] = bool(
        (disk_free is None or disk < disk_free)
        and (memory is None or service is None or (service + (agent or 0)) * 2**20 < memory)
    )
    return out


def findings(by_source: dict[str, dict]) -> list[str]:
    """Sentences made from the figures: how flat each phase stays, and what 100M would take."""
    out = []
    for source, p in by_source.items():
        if p["flat"]:
            worst = max(p["flat"].items(), key=lambda kv: abs(kv[1] - 1))
            out.append(
                f"{source}: from {p['sizes'][0]:,} to {p['sizes'][-1]:,} rows the steady sync's cost per row "
                f"changed {p['flat'].get('sync s/M rows', float('nan')):.2f}x; the phase that moved most is "
                f"{worst[0].removesuffix(' s/M rows')} ({worst[1]:.2f}x)."
            )
        out.append(
            f"{source} at {p['target rows']:,} rows (straight-line fit): a steady sync ~{p['steady sync s']:,.0f} s, "
            f"the load ~{p['load s']:,.0f} s, ~{p['hours']:.1f} h for a run, ~{p['disk GB']:,.0f} GB of disk, "
            f"agent {_mib(p['agent peak MiB'])}, service {_mib(p['service peak MiB'])}: "
            + ("fits this machine." if p["fits"] else "does NOT fit this machine.")
        )
    return out


def _mib(value: float | None) -> str:
    return "not projected (one size)" if value is None else f"~{value:,.0f} MiB"


def run(args: argparse.Namespace) -> int:
    args.dir.mkdir(parents=True, exist_ok=True)
    for source in args.sources:
        for rows in args.rows:
            out = args.dir / f"{sitting_name(source, rows)}.json"
            if out.exists() and not args.redo:
                print(f"{out.name}: kept (--redo runs it anew)", flush=True)
                continue
            command = [
                sys.executable, "-m", "tests.benchmarks", "--full", "--workloads", "students",
                "--strategies", "auto", "--rows", str(rows), "--source", source,
                "--rounds", str(args.rounds), "--no-quiet-round", "--out", str(out),
            ]  # fmt: skip
            print("sitting:", " ".join(command[1:]), flush=True)
            done = subprocess.run(command, check=False)
            if done.returncode != 0:
                print(f"{out.name}: the sitting failed ({done.returncode}); the others go on", flush=True)
    return write_report(args)


def write_report(args: argparse.Namespace) -> int:
    files = sorted(args.dir.glob("*.json"))
    if not files:
        print(f"no sittings in {args.dir}: run `python -m tests.benchmarks.scale run` first", file=sys.stderr)
        return 2
    rows = [row for f in files for row in sittings(json.loads(f.read_text()))]
    commits = {r["commit"] for r in rows}
    if len(commits) > 1 and not args.mixed_commits:
        print(
            f"the sittings ran at different commits {sorted(commits)}: rerun them (--redo) or pass --mixed-commits",
            file=sys.stderr,
        )
        return 2
    free = shutil.disk_usage(args.dir).free
    memory = (machine.describe().get("mem_total_kb") or 0) * 1024 or None
    rows = [r for r in rows if r["strategy"] == "auto"]  # the default strategy is what scales
    by_source = {
        s: projection([r for r in rows if r["source"] == s], disk_free=free, memory=memory)
        for s in dict.fromkeys(r["source"] for r in rows)
    }
    out = {
        "date": max(json.loads(f.read_text())["meta"]["date"] for f in files),
        "machine": machine.describe(),
        "summary": by_source,
        "findings": findings(by_source),
        "sittings": sorted(rows, key=lambda r: (r["source"], r["rows"])),
    }
    machine.save(out, argparse.Namespace(out=args.out), "tests.benchmarks.scale report", markdown)
    return 0


def markdown(out: dict) -> str:
    """The report as Markdown: findings, then one row per sitting."""
    keys = [k for k in out["sittings"][0] if k != "commit"]
    lines = ["# Scale projection", "", *(f"- {f}" for f in out["findings"]), "", "| " + " | ".join(keys) + " |"]
    lines.append("|" + "---|" * len(keys))
    lines += [
        "| "
        + " | ".join("—" if r.get(k) is None else f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k in keys)
        + " |"
        for r in out["sittings"]
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.scale", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("run", "report"))
    parser.add_argument("--rows", type=lambda t: [int(x) for x in t.split(",")], default=list(ROWS))
    parser.add_argument("--sources", type=lambda t: t.split(","), default=list(SOURCES))
    parser.add_argument("--rounds", type=int, default=2, help="sync rounds after each sitting's load (default 2)")
    parser.add_argument("--dir", type=Path, default=DIR, help="where the sittings' results go")
    parser.add_argument("--out", type=Path, default=OUT, help="the report (.json and .md)")
    parser.add_argument("--redo", action="store_true", help="run sittings whose results exist anew")
    parser.add_argument("--mixed-commits", action="store_true", help="report sittings of different commits together")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run(args) if args.action == "run" else write_report(args)


if __name__ == "__main__":
    raise SystemExit(main())
