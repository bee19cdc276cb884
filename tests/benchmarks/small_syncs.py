"""The small and first syncs of a run: what the first sync after the load cost against full_ship's, and
what the no-change round moved in its requests' and answers' bodies (HTTP's headers apart)."""

from __future__ import annotations

HEADING = "## First syncs and no-change syncs"
INTRO = (
    "*first sync* = bytes of round 1, the first sync after the load (the statistics hold only the prior), and "
    "that over full_ship's round 1 when full_ship ran; *no-change bodies* = bytes of the no-change round's "
    "request and answer bodies to / from the agent, HTTP's headers left out (— where the run predates their count)."
)


def _size(n: float | None) -> str:
    return "—" if n is None else f"{n:,.0f} B"


def rows(results: dict) -> list[dict]:
    """One row per workload and strategy: first sync bytes, its ratio to full_ship's, no-change bodies.

    >>> run = {"workloads": {"w": {"strategies": {
    ...     "full_ship": {"rounds": [{"round": 0, "bytes": 9}, {"round": 1, "bytes": 100}]},
    ...     "auto": {"rounds": [{"round": 0, "bytes": 9}, {"round": 1, "bytes": 106}],
    ...              "no_change": {"bytes": 900, "body_bytes_to_agent": 170, "body_bytes_from_agent": 410}}}}}}
    >>> [(r["strategy"], r["first_sync_bytes"], r["over_full_ship"], r["no_change_body_bytes"]) for r in rows(run)]
    [('full_ship', 100, 1.0, None), ('auto', 106, 1.06, (170, 410))]
    """
    out = []
    for wname, w in results["workloads"].items():
        firsts = {
            name: next((r["bytes"] for r in s["rounds"] if r["round"] == 1 and not r.get("error")), None)
            for name, s in w.get("strategies", {}).items()
        }
        full = firsts.get("full_ship")
        for name, s in w.get("strategies", {}).items():
            quiet = s.get("no_change") or {}
            bodies = (quiet.get("body_bytes_to_agent"), quiet.get("body_bytes_from_agent"))
            first = firsts[name]
            out.append(
                {
                    "workload": wname,
                    "strategy": name,
                    "first_sync_bytes": first,
                    "over_full_ship": round(first / full, 3) if first is not None and full else None,
                    "no_change_body_bytes": bodies if None not in bodies else None,
                }
            )
    return out


def table(results: dict) -> str | None:
    """The section in Markdown, or None when no strategy ran a first sync."""
    found = [r for r in rows(results) if r["first_sync_bytes"] is not None]
    if not found:
        return None
    lines = [
        HEADING,
        "",
        INTRO,
        "",
        "| workload · strategy | first sync | × full_ship | no-change bodies (to / from) |",
        "|---|---:|---:|---:|",
    ]
    for r in found:
        ratio = "—" if r["over_full_ship"] is None else f"{r['over_full_ship']:.3f}×"
        bodies = r["no_change_body_bytes"]
        quiet = "—" if bodies is None else f"{_size(bodies[0])} / {_size(bodies[1])}"
        lines.append(f"| {r['workload']} · {r['strategy']} | {_size(r['first_sync_bytes'])} | {ratio} | {quiet} |")
    return "\n".join(lines)
