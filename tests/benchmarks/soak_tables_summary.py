"""The tables soak's figures (soak_tables.py), from what it recorded: lateness of the schedules, by size and source; syncs a minute; growth.

Pure functions of the sync records and samples, so that the verdicts can be checked
without running the soak.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from collections.abc import Iterable

from tests.benchmarks.soak_summary import GROWTH_GOAL, growth, minutes_table, per_minute

#: #52's goal: this share of the scheduled syncs start within LATE_SHARE of their period after they are due.
ON_TIME_GOAL, LATE_SHARE = 0.95, 0.10


def _at(iso: str | None) -> float | None:
    return dt.datetime.fromisoformat(iso).timestamp() if iso else None


def lateness(syncs: Iterable[dict], every_s: float, start: float, end: float) -> dict[str, list[float]]:
    """Each view's scheduled syncs that became due within [start, end] (epoch seconds): seconds
    from due (its previous sync's end plus the period) to its start; one not started by `end`
    counts as late by `end` less its due time (at least that).

    >>> iso = lambda t: dt.datetime.fromtimestamp(t, dt.UTC).isoformat()
    >>> syncs = [
    ...     {"view": "a", "trigger": "api", "created_at": iso(0), "started_at": iso(0), "finished_at": iso(10)},
    ...     {"view": "a", "trigger": "schedule", "created_at": iso(70), "started_at": iso(72), "finished_at": iso(80)},
    ...     {"view": "b", "trigger": "schedule", "created_at": iso(0), "started_at": iso(1), "finished_at": iso(20)},
    ... ]
    >>> lateness(syncs, 60, 0, 100)  # a: due at 70, started at 72, due again at 140; b: due at 80, not started
    {'a': [2.0], 'b': [20.0]}
    """
    views: dict[str, list[dict]] = defaultdict(list)
    for s in syncs:
        views[s["view"]].append(s)
    out: dict[str, list[float]] = {}
    for view, records in views.items():
        records.sort(key=lambda s: s["created_at"])
        late = []
        for prev, cur in zip(records, [*records[1:], None], strict=True):
            ended = _at(prev.get("finished_at"))
            if ended is None:
                continue
            due = ended + every_s
            if not start <= due <= end:
                continue
            began = _at(cur.get("started_at")) if cur is not None else None
            if cur is not None and cur.get("trigger") != "schedule":
                continue  # a sync asked for before it was due: the schedule counts from its end
            if began is not None:
                late.append(round(max(0.0, began - due), 3))
            elif end > due:
                late.append(round(end - due, 3))
        out[view] = late
    return out


def on_time(late: Iterable[float], every_s: float) -> dict:
    """Median, 95th percentile and longest lateness, and the share within LATE_SHARE of the period.

    >>> on_time([0.5, 1.0, 2.0, 40.0], 300)
    {'syncs': 4, 'median_s': 1.5, 'p95_s': 40.0, 'longest_s': 40.0, 'on_time': 0.75, 'met': False}
    >>> on_time([], 300)["met"] is None
    True
    """
    late = sorted(late)
    if not late:
        return {"syncs": 0, "median_s": None, "p95_s": None, "longest_s": None, "on_time": None, "met": None}
    share = sum(1 for x in late if x <= LATE_SHARE * every_s) / len(late)
    return {
        "syncs": len(late),
        "median_s": round(statistics.median(late), 3),
        "p95_s": late[min(len(late) - 1, round(0.95 * (len(late) - 1)))],
        "longest_s": late[-1],
        "on_time": round(share, 4),
        "met": share >= ON_TIME_GOAL,
    }


def size_class(rows: int, scale: float) -> str:
    """A table's size as the schema draws it (the small ones in a range).

    >>> size_class(4_000, 1.0), size_class(100_000, 1.0), size_class(10_000, 0.01)
    ('small', '100,000 rows', '1,000,000 rows')
    """
    unscaled = round(rows / scale)
    return "small" if unscaled <= 10_000 else f"{unscaled:,} rows"


def summarize(out: dict) -> dict:
    """The headline: lateness against the goal, overall, by size and by source; throughput; growth; the check."""
    start, end = out["run"]["started_at"], out["run"]["ended_at"]
    every_s = out["settings"]["every_s"]
    views = out["views"]
    records = [*out["syncs"].values(), *out.get("active_at_end", [])]
    late = lateness(records, every_s, start, end)
    by_size, by_source = defaultdict(list), defaultdict(list)
    for view, values in late.items():
        if view in views:
            by_size[size_class(views[view]["rows"], out["settings"]["rows_scale"])] += values
            by_source[views[view]["source"]] += values
    ran = [s for s in out["syncs"].values() if start <= (_at(s["finished_at"]) or -1) <= end]
    memory = growth(((t, kb) for t, kb, _ in out["samples"] if kb is not None), start, end)
    disk = growth(((t, b) for t, _, b in out["samples"]), start, end)
    return {
        "views": len(views),
        "sources": len({v["source"] for v in views.values()}),
        "rows": sum(v["rows"] for v in views.values()),
        "warm_up_s": out["warm_up"]["seconds"],
        "loaded_before_run": out["warm_up"]["loaded"],
        "minutes": round((end - start) / 60, 1),
        "every_s": every_s,
        "syncs_ended": len(ran),
        "failed": sum(1 for s in ran if s["status"] == "failed"),
        "syncs_per_minute": per_minute(ran, start, end),
        "schedules_ask_per_minute": round(60 * len(views) / every_s, 1),
        "lateness": on_time((x for v in late.values() for x in v), every_s),
        "lateness_by_size": {k: on_time(v, every_s) for k, v in sorted(by_size.items())},
        "lateness_by_source": {k: on_time(v, every_s) for k, v in sorted(by_source.items())},
        "queued_or_running_at_end": len(out.get("active_at_end", [])),
        "writer": out["writer"],
        "views_checked": out["check"]["views"],
        "views_exact": out["check"]["exact"],
        "views_not_exact": out["check"]["differ"],
        "service_log_tracebacks": out["service_log"]["tracebacks"],
        "memory_kb": memory,
        "data_dir_bytes": disk,
    }


def _growth(g: dict, unit: int) -> str:
    if g["growth"] is None:
        return "not measured (too few samples)"
    verdict = "met" if g["met"] else "NOT met"
    return (
        f"{g['middle'] / unit:,.0f} MiB around the middle, {g['end'] / unit:,.0f} MiB at the end: "
        f"{100 * g['growth']:+.1f} % ({verdict}, goal ≤ {100 * GROWTH_GOAL:.0f} %)"
    )


def findings(s: dict) -> list[str]:
    """What the figures say, in sentences made from them."""
    late = s["lateness"]
    verdict = "met" if late["met"] else "NOT met"
    sizes = "; ".join(
        f"{k}: {100 * (v['on_time'] or 0):.1f} % on time, p95 {v['p95_s']} s" for k, v in s["lateness_by_size"].items()
    )
    worst = min(s["lateness_by_source"].items(), key=lambda kv: kv[1]["on_time"] or 0, default=(None, {}))
    exact = (
        f"all {s['views_checked']} exact"
        if not s["views_not_exact"]
        else f"{len(s['views_not_exact'])} of {s['views_checked']} NOT exact"
    )
    return [
        f"{s['views']:,} views ({s['rows']:,} rows) over {s['sources']} sources, each scheduled every "
        f"{s['every_s']} s; their loads took {s['warm_up_s']:,.0f} s ({s['loaded_before_run']:,} loaded before "
        f"the run), then {s['minutes']} minutes with a writer.",
        f"Schedules: {100 * (late['on_time'] or 0):.1f} % of {late['syncs']:,} due syncs started within "
        f"{100 * LATE_SHARE:.0f} % of the period ({verdict}, goal {100 * ON_TIME_GOAL:.0f} %); lateness median "
        f"{late['median_s']} s, p95 {late['p95_s']} s, longest {late['longest_s']} s.",
        f"By table size: {sizes}. The least served source: {worst[0]} "
        f"({100 * (worst[1].get('on_time') or 0):.1f} % on time).",
        f"{s['syncs_per_minute']} syncs ended a minute against {s['schedules_ask_per_minute']} the schedules ask; "
        f"{s['failed']} failed; {s['queued_or_running_at_end']} queued or running at the end.",
        f"The service's memory (its process and Spark JVM): {_growth(s['memory_kb'], 1024)}. "
        f"The data directory: {_growth(s['data_dir_bytes'], 2**20)}.",
        f"A sample of views synced once more after the writer stopped: {exact} against their tables.",
    ]


def markdown(out: dict) -> str:
    """The results as a page: the command, the findings, lateness by size and source, the minutes."""
    s = out["summary"]
    lines = [
        f"# Soak: {s['views']:,} mirrored tables, each every {s['every_s']} s, {s['minutes']} minutes",
        "",
        f"Command: `{out['command']}` at commit {out['commit']}, {out['date']}.",
        "",
        *(f"- {f}" for f in out["findings"]),
        "",
        "| syncs of | due syncs | on time | median s | p95 s | longest s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for group in ("lateness_by_size", "lateness_by_source"):
        for k, v in s[group].items():
            share = "—" if v["on_time"] is None else f"{100 * v['on_time']:.1f} %"
            lines.append(f"| {k} | {v['syncs']} | {share} | {v['median_s']} | {v['p95_s']} | {v['longest_s']} |")
    return "\n".join([*lines, "", *minutes_table(out["minutes"])]) + "\n"
