"""Before and after: two results files of the same benchmark, figure by figure, per workload and strategy.

    python -m tests.benchmarks.compare --out results/compare-NAME BEFORE.json AFTER.json [BEFORE.json AFTER.json ...]

Each pair is two runs of `python -m tests.benchmarks` (any profile) on the same workloads:
for every workload and strategy both ran, the steady state's sync seconds, sync ÷ floor,
bytes a round, × the lower bound, the agent's read, convert and hash seconds and its peak
memory, and the service's peak memory, as "before → after" with the change. A figure one
run did not record (a floor before floors were measured) says so rather than guessing.
Written as OUT.json and OUT.md, with each pair's files, dates and commits; the documentation
renders it like any results file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from tests.benchmarks import machine, report

NOT_MEASURED = "not measured"


def figures(results: dict) -> dict[tuple[str, str], dict]:
    """{(workload, strategy): steady-state figures} of one results file."""
    summary = report.summarize(results)
    out = {}
    for wname, entry in summary.items():
        w = results["workloads"][wname]
        for sname, s in entry["strategies"].items():
            timings = (s.get("time") or {}).get("agent_timings") or {}
            out[(wname, sname)] = {
                "rows": results["meta"].get("rows_by_workload", {}).get(wname),
                "sync s": s.get("wall_s"),
                "÷ floor": s.get("x_floor"),
                "bytes/round": s.get("bytes"),
                "× LB": s.get("x_lower_bound"),
                "agent read s": timings.get("read_s"),
                "agent convert s": timings.get("convert_s"),
                "agent hash s": timings.get("hash_s"),
                "agent peak MiB": s["agent_peak_rss_kb"] / 1024 if s.get("agent_peak_rss_kb") else None,
                "service peak MiB": w["service_peak_rss_kb"] / 1024 if w.get("service_peak_rss_kb") else None,
            }
    return out


def change(before: float | None, after: float | None) -> str:
    """One figure before and after, with the ratio.

    >>> change(9.48, 4.5)
    '9.48 → 4.5 (0.47×)'
    >>> change(None, 1.5)
    'not measured → 1.5'
    >>> change(1_200_000, 800_000)
    '1,200,000 → 800,000 (0.67×)'
    """

    def shown(v: float | None) -> str:
        if v is None:
            return NOT_MEASURED
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"

    ratio = f" ({after / before:.2f}×)" if before and after is not None else ""
    return f"{shown(before)} → {shown(after)}{ratio}"


def compare(pairs: list[tuple[Path, Path]]) -> dict:
    """The comparison of each (before, after) pair, as a results document."""
    summary: dict[str, dict] = {}
    runs = []
    for before_path, after_path in pairs:
        before, after = json.loads(before_path.read_text()), json.loads(after_path.read_text())
        runs.append(
            {
                side: f"{path.name} ({doc['meta']['date'][:10]}, {doc['meta'].get('git_commit', '')[:10]})"
                for side, path, doc in (("before", before_path, before), ("after", after_path, after))
            }
        )
        old, new = figures(before), figures(after)
        for key in [k for k in new if k in old]:
            workload, strategy = key
            label = f"{workload} · {strategy} · {new[key]['rows'] or 0:,} rows"
            summary[label] = {name: change(old[key][name], new[key][name]) for name in new[key] if name != "rows"}
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "summary": summary,
        "runs": runs,
    }


def markdown(out: dict) -> str:
    lines = ["# Before and after", ""]
    lines += [f"- before {r['before']}, after {r['after']}" for r in out["runs"]]
    for label, row in out["summary"].items():
        lines += ["", f"## {label}", "", "| figure | before → after |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in row.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.compare", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="BEFORE.json AFTER.json, one pair or more")
    parser.add_argument("--out", type=Path, required=True, help="where the comparison goes (.json and .md)")
    args = parser.parse_args(argv)
    if len(args.files) % 2:
        parser.error("give the files in pairs: BEFORE.json AFTER.json")
    pairs = list(zip(args.files[::2], args.files[1::2], strict=True))
    machine.save(compare(pairs), args, "tests.benchmarks.compare", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
