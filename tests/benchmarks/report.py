"""Results on disk: the JSON, one PNG per workload and a Markdown summary: the bytes table and
the time breakdown (where a sync's seconds go, against the floor: the source engine's fastest
bulk read of the same site query, floors.py).

The summary is the steady state: medians over the last half of the rounds (never round 0,
the initial load, nor round 1 unless it is the only one), so that statistics that warm up
over the first syncs do not blur the comparison. The no-change sync after the last round
(each strategy's `no_change` record, kept apart from its `rounds`) is never part of the
steady state; the table shows it in a column of its own, against the strategy's load.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from tests.benchmarks import agent_peaks, small_syncs
from tests.benchmarks.floors import fastest, steady_floor

#: One colour per strategy across all plots, so a figure reads like the previous one.
COLOURS = {
    "full_ship": "tab:red",
    "tuple_hash": "tab:orange",
    "range_checksum": "tab:purple",
    "group_hash": "tab:blue",
    "reladiff": "tab:green",
    "sketch": "tab:cyan",
    "auto": "tab:olive",
}


def steady_rounds(rounds: int) -> list[int]:
    """Rounds whose median is the steady state: the last half, rounded up.

    >>> steady_rounds(5), steady_rounds(10), steady_rounds(1)
    ([3, 4, 5], [6, 7, 8, 9, 10], [1])
    """
    first = max(1, rounds - (rounds + 1) // 2 + 1)
    return list(range(first, rounds + 1))


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


#: The sync's steps (warehouse/pipeline/sync.py), a site extraction's steps (warehouse/pipeline/site_sync.py)
#: and the agent's split of its time, in the order they run; a name a newer service adds
#: is kept, after these.
SYNC_PHASES = ("extract_sites", "build_fragments", "assemble_view", "commit")
SITE_PHASES = ("project_snapshot", "plan_groups", "exchange_units", "regroup")
AGENT_TIMINGS = ("read_s", "convert_s", "hash_s", "send_s", "lookup_s", "wait_s")
#: Heads the time breakdown in the summary, below the bytes table.
TIME_HEADING = "## Where the time goes"
#: What a results file from before the floors shows in their place.
NOT_MEASURED = "not measured"


def median_by_key(dicts, order: tuple[str, ...] = ()) -> dict:
    """Per key, the median of the values the dicts have for it: known keys first, in `order`.

    >>> median_by_key([{"b": 1.0, "a": 4.0}, {"a": 2.0}, None, {"a": 3.0, "z": 0.5}], order=("a", "b"))
    {'a': 3.0, 'b': 1.0, 'z': 0.5}
    """
    dicts = [d for d in dicts if d]
    keys = {k for d in dicts for k in d}
    ordered = [k for k in order if k in keys] + sorted(keys - set(order))
    return {k: _median([d.get(k) for d in dicts]) for k in ordered}


def summed_by_key(dicts) -> dict | None:
    """The dicts added key by key (a view's sites, say); None when there is nothing to add.

    >>> summed_by_key([{"read_s": 1.0, "hash_s": 0.25}, {"read_s": 0.5}]), summed_by_key([{}, None])
    ({'read_s': 1.5, 'hash_s': 0.25}, None)
    """
    out: dict = {}
    for d in dicts:
        for k, v in (d or {}).items():
            if v is not None:
                out[k] = out.get(k, 0) + v
    return out or None


def agent_timings(record: dict) -> dict | None:
    """The agent's split of its time in a sync record: the view's own, else summed over its sites.

    >>> agent_timings({"site_agent_timings": [{"read_s": 0.5}, {"read_s": 0.25}]})
    {'read_s': 0.75}
    >>> agent_timings({"agent_seconds": 1.0}) is None
    True
    """
    return record.get("agent_timings") or summed_by_key(record.get("site_agent_timings") or [])


def time_breakdown(results: dict) -> dict:
    """{workload: {strategy: steady-state medians of where a sync's seconds go}}.

    Per strategy: the client's `wall_s` and the service's `sync_wall_s`, the sync's
    `phases`, the extraction's `site_phases` (summed over the view's sites), `agent_seconds`
    and `agent_timings` (where the records have them: empty or None otherwise), the floor of
    the same rounds (None in results from before it was measured) and the median ratio of
    wall time to it. Recomputed from the round records, so older results give what they recorded.
    """
    steady = steady_rounds(results["meta"]["rounds"])
    out = {}
    for wname, w in results["workloads"].items():
        floors = w.get("floor_rounds", [])
        entry = {}
        for sname, s in w.get("strategies", {}).items():
            rounds = {r["round"]: r for r in s["rounds"]}
            picked = [rounds[i] for i in steady if i in rounds and not rounds[i].get("error")]
            entry[sname] = {
                "rounds": [r["round"] for r in picked],
                "wall_s": _median([r["wall_s"] for r in picked]),
                "sync_wall_s": _median([r.get("sync_wall_s") for r in picked]),
                "phases": median_by_key([r.get("phases") for r in picked], SYNC_PHASES),
                "site_phases": median_by_key([summed_by_key(r.get("site_phases") or []) for r in picked], SITE_PHASES),
                "agent_seconds": _median([r.get("agent_seconds") for r in picked]),
                "agent_timings": median_by_key([agent_timings(r) for r in picked], AGENT_TIMINGS),
                "floor": steady_floor(floors, [r["round"] for r in picked]),
                "x_floor": x_floor(picked, floors),
            }
        out[wname] = entry
    return out


def x_floor(records: list[dict], floors: list[dict]) -> float | None:
    """The median of each sync's wall time over its round's floor (the round's fastest bulk read);
    None where no round of theirs measured one.

    >>> x_floor([{"round": 1, "wall_s": 3.0}, {"round": 2, "wall_s": 4.0}], [{}, {"adbc": 1.0, "psql": 2.0}, {"adbc": 2.0}])
    2.5
    >>> x_floor([{"round": 1, "wall_s": 3.0}], []) is None
    True
    """
    ratios = []
    for r in records:
        best = fastest(floors[r["round"]]) if r["round"] < len(floors) else None
        if best and best[1]:
            ratios.append(r["wall_s"] / best[1])
    return _median(ratios)


def stamp_reads(rounds: list[dict], views: list) -> dict:
    """Medians of the change-stamp reports of `rounds` (none: {}).

    >>> stamp_reads([{"round": 1, "timestamp": {"rows_read": 30, "rows_fetched": 2, "keys_reconciled": 10, "index_used": True}}], [0, 1000])
    {'x_rows_read': 0.032, 'keys_reconciled': 10, 'index_used': True, 'reconciled': 0, 'changed_read_s': None, 'key_reconciliation_s': None, 'key_agent_s': None}
    """
    reports = [(r, r.get("timestamp") or r.get("row_version")) for r in rounds]
    reports = [(r, rep) for r, rep in reports if rep]
    if not reports:
        return {}
    read = [
        ((rep.get("rows_read") or 0) + (rep.get("rows_fetched") or 0)) / views[r["round"]]
        for r, rep in reports
        if views[r["round"]]
    ]
    return {
        "x_rows_read": _median(read),
        "keys_reconciled": _median([rep.get("keys_reconciled") or 0 for _, rep in reports]),
        "index_used": any(rep.get("index_used") for _, rep in reports),
        "reconciled": sum(1 for _, rep in reports if rep.get("reconciled")),
        # seconds of the two reads, which run side by side (absent before they were timed)
        **{
            name: _median([rep[field] for _, rep in reports if rep.get(field) is not None])
            for name, field in (
                ("changed_read_s", "changed_read_s"),
                ("key_reconciliation_s", "key_reconciliation_s"),
                ("key_agent_s", "key_agent_seconds"),
            )
        },
    }


def summarize(results: dict) -> dict:
    """{workload: {"lower_bound_bytes", "floor", "strategies": {name: steady-state figures}}}."""
    steady = steady_rounds(results["meta"]["rounds"])
    out = {}
    for wname, w in results["workloads"].items():
        lbs = w.get("lower_bound_bytes", [])
        clbs = w.get("column_lower_bound_bytes", [])  # absent in results from before it was measured
        floors = w.get("floor_rounds", [])
        views = w.get("view_rows", [])
        entry = {
            "rounds": steady,
            "lower_bound_bytes": _median([lbs[i] for i in steady if i < len(lbs)]),
            "column_lower_bound_bytes": _median([clbs[i] for i in steady if i < len(clbs)]),
            # {"seconds", "method", "methods"}; None in results from before the floors
            "floor": steady_floor(floors, steady),
            "strategies": {},
        }
        for sname, s in w.get("strategies", {}).items():
            rounds = {r["round"]: r for r in s["rounds"]}
            load = rounds[0]["bytes"] if 0 in rounds and not rounds[0].get("error") else None
            quiet = s.get("no_change")  # absent in results from before the no-change round
            quiet_bytes = quiet["bytes"] if quiet and not quiet.get("error") else None
            picked = [rounds[i] for i in steady if i in rounds and not rounds[i].get("error")]
            entry["strategies"][sname] = {
                "bytes": _median([r["bytes"] for r in picked]),
                "bytes_to_agent": _median([r["bytes_to_agent"] for r in picked]),
                "bytes_from_agent": _median([r["bytes_from_agent"] for r in picked]),
                "round_trips": _median([r["round_trips"] for r in picked]),
                "x_lower_bound": _median([r["bytes"] / lbs[r["round"]] for r in picked if lbs[r["round"]]]),
                "x_column_lower_bound": _median(
                    [r["bytes"] / clbs[r["round"]] for r in picked if r["round"] < len(clbs) and clbs[r["round"]]]
                ),
                "wall_s": _median([r["wall_s"] for r in picked]),
                "x_floor": x_floor(picked, floors),
                # rows read at the source per row of the view: 1 for one pass over the site query
                "x_rows_scanned": _median(
                    [
                        r["rows_scanned"] / views[r["round"]]
                        for r in picked
                        if r.get("rows_scanned") is not None and views[r["round"]]
                    ]
                ),
                # the change-stamp strategies: whole rows read per row of the view (the ranged read and
                # the rows fetched), and keys that travelled in the key reconciliation
                **stamp_reads(picked, views),
                "load_bytes": rounds[0]["bytes"] if 0 in rounds else None,
                "load_wall_s": rounds[0]["wall_s"] if 0 in rounds else None,
                # the sync after the last round with nothing changed, and its share of this strategy's load
                "no_change_bytes": quiet_bytes,
                "no_change_of_load": quiet_bytes / load if quiet_bytes is not None and load else None,
                "no_change_wall_s": quiet["wall_s"] if quiet_bytes is not None else None,
                "agent_peak_rss_kb": s.get("agent_peak_rss_kb"),
                "agent_tree_peak_pss_kb": s.get("agent_tree_peak_pss_kb"),
                "exact": bool(s["rounds"])
                and all(r["exact"] for r in s["rounds"])
                and len(s["rounds"]) == results["meta"]["rounds"] + 1
                and (quiet is None or quiet["exact"]),
                "failed": s.get("failed"),
            }
        out[wname] = entry
    for wname, times in time_breakdown(results).items():
        for sname, figures in times.items():
            out[wname]["strategies"][sname]["time"] = figures
    return out


def _size(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:,.{0 if n >= 100 * scale else 1}f} {unit}"
    return f"{n:,.0f} B"


def _si_bytes(n: float) -> str:
    """Decimal units for axis ticks at 1-2-5 steps: 200 kB, not 195 KiB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def _x(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}×"


def _percent(share: float) -> str:
    """A share as a percentage, to about two significant digits.

    >>> [_percent(v) for v in (1.0, 0.123, 0.0999, 0.0123, 0.00999, 0.0003, 0.00001, 0.0)]
    ['100 %', '12 %', '10 %', '1.2 %', '1.0 %', '0.03 %', '<0.01 %', '0 %']
    """
    p = share * 100
    if p == 0:
        return "0 %"
    # the thresholds are where the rounded figure gains a digit: 0.999 % reads 1.0 %, not 1.00 %
    if p >= 9.95:
        return f"{p:,.0f} %"
    if p >= 0.995:
        return f"{p:.1f} %"
    return f"{p:.2f} %" if p >= 0.005 else "<0.01 %"


def _no_change(t: dict) -> str:
    """The no-change sync's bytes and their share of the load: "12 KiB (0.03 %)"; "—" if not run."""
    if t.get("no_change_bytes") is None:
        return "—"
    share = t.get("no_change_of_load")
    return _size(t["no_change_bytes"]) + ("" if share is None else f" ({_percent(share)})")


def _sources(results: dict) -> str:
    """Which engine each workload's agent read: "SQLite", or "SQLite; PostgreSQL for students@postgres"."""
    names = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mariadb": "MariaDB"}
    # results from before the PostgreSQL source read SQLite only
    by_source: dict[str, list[str]] = {}
    for wname, w in results["workloads"].items():
        by_source.setdefault(w.get("source", "sqlite"), []).append(wname)
    if len(by_source) <= 1:
        return names.get(next(iter(by_source), "sqlite"), "?")
    main = max(by_source, key=lambda s: len(by_source[s]))
    return "; ".join(
        [names[main]] + [f"{names.get(s, s)} for {', '.join(ws)}" for s, ws in by_source.items() if s != main]
    )


def _by_process(workload: dict) -> str:
    """The service's peak split over its processes: " (java 5.1 GiB, python3 300 MiB)"; "" if not recorded."""
    split = workload.get("service_peak_rss_by_process_kb") or {}
    parts = [f"{name} {_size(kb * 1024)}" for name, kb in sorted(split.items(), key=lambda item: -item[1])]
    return f" ({', '.join(parts)})" if len(parts) > 1 else ""


def _service_memory(results: dict) -> str | None:
    """A sentence on the service's peak memory, per workload and over the run; None before it was measured."""
    meta = results["meta"]
    per = {w: r["service_peak_rss_kb"] for w, r in results["workloads"].items() if r.get("service_peak_rss_kb")}
    if not per and not meta.get("service_peak_rss_kb"):
        return None
    return (
        "Service peak RSS (the service process, its Spark JVM and the JVM's Python workers, summed; sampled every 0.5 s from /proc): "
        + "; ".join(f"{w} {_size(kb * 1024)}{_by_process(results['workloads'][w])}" for w, kb in per.items())
        + (f"; whole run {_size(meta['service_peak_rss_kb'] * 1024)}" if meta.get("service_peak_rss_kb") else "")
        + "."
    )


def markdown(results: dict, summary: dict) -> str:
    meta = results["meta"]
    steady = steady_rounds(meta["rounds"])
    commit = (meta.get("git_commit") or "?")[:10] + (" (uncommitted changes)" if meta.get("git_dirty") else "")
    parts = meta.get("parts") or []
    when = f"{meta['date']}, commit {commit}"
    if parts:
        first_day, last_day = min(p["date"][:10] for p in parts), max(p["date"][:10] for p in parts)
        span = first_day if first_day == last_day else f"{first_day} to {last_day}"
        when = f"{len(parts)} sittings, {span} (listed below)"
    lines = [
        f"# Benchmark `{meta['name']}`",
        "",
        f"{when}; {meta['cpus']} CPUs ({meta.get('cpu') or '?'}); "
        f"{meta['rounds']} rounds after the load; rows per workload: "
        + ", ".join(f"{w} {n:,}" for w, n in meta["rows_by_workload"].items())
        + (f"; link {meta['link_mbit']} Mbit/s" if meta.get("link_mbit") else "; no link limit (loopback)")
        + f"; source: {_sources(results)}"
        + f"; {'all sittings' if parts else 'whole run'} {meta.get('elapsed_s', 0) / 60:.1f} min.",
        "",
        *([f"Plan: {meta['plan']}.", ""] if meta.get("plan") else []),
        f"Steady state = median over rounds {steady[0]}–{steady[-1]}. *bytes/round* = bytes to + from the agent per sync; "
        "*× LB* = ratio to the lower bound (zstd Arrow of the true delta); *× CLB* = ratio to the column-level bound "
        "(the same with each update's key and changed values only); *÷ floor* = sync wall time over the floor, "
        "the fastest bulk read of the same site query at the source by the engine's own export path, timed in the same "
        "rounds (its method and seconds on each workload's *floor* line; the methods under *Floors*); "
        "*rows read* = rows the agent read at the source per row of the view; "
        + (
            "*no-change round*: not run (`--no-quiet-round`)."
            if meta.get("no_change_round") is False
            else f"*no-change round* = bytes to + from the agent of one more sync after round {meta['rounds']} with nothing changed at the source "
            "(not in the steady state), and their share of the strategy's own load (round 0); — where not run."
        ),
        "",
        "| workload | strategy | bytes/round | to agent | from agent | × LB | × CLB | sync time | ÷ floor | rows read | agent peak RSS | no-change round | exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for wname, s in summary.items():
        w = results["workloads"][wname]
        if w.get("error"):
            lines.append(f"| {wname} | *error: {w['error'][:120]}* | | | | | | | | | | | |")
        quiet_lb = _size(w["no_change"]["lower_bound_bytes"]) if w.get("no_change") else ""
        lines.append(
            f"| {wname} | *lower bound* | {_size(s['lower_bound_bytes'])} | | | 1.0× | | | | | | {quiet_lb} | |"
        )
        floor = s.get("floor")
        lines.append(
            f"| {wname} | *floor: {floor['method']}* | | | | | | {floor['seconds']:,.2f} s | 1.0× | | | | |"
            if floor
            else f"| {wname} | *floor: {NOT_MEASURED}* | | | | | | | | | | | |"
        )
        if s.get("column_lower_bound_bytes") is not None:
            lines.append(
                f"| {wname} | *column-level bound* | {_size(s['column_lower_bound_bytes'])} | | | | 1.0× | | | | | | |"
            )
        for sname, t in s["strategies"].items():
            rss = f"{t['agent_peak_rss_kb'] / 1024:,.0f} MiB" if t["agent_peak_rss_kb"] else "—"
            if t.get("agent_tree_peak_pss_kb"):
                rss += f" ({t['agent_tree_peak_pss_kb'] / 1024:,.0f} PSS with readers)"
            exact = "yes" if t["exact"] else ("**failed**" if t["failed"] else "**NO**")
            sync = "—" if t["wall_s"] is None else f"{t['wall_s']:,.1f} s"
            lines.append(
                f"| {wname} | {sname} | {_size(t['bytes'])} | {_size(t['bytes_to_agent'])} | {_size(t['bytes_from_agent'])} | {_x(t['x_lower_bound'])} | {_x(t.get('x_column_lower_bound'))} | {sync} | {_x(t['x_floor'])} | {_x(t['x_rows_scanned'])} | {rss} | {_no_change(t)} | {exact} |"
            )
    if parts:
        lines += [
            "",
            "Joined from runs in several sittings (`--merge`): "
            + "; ".join(
                f"{', '.join(part['workloads'])} on {part['date'][:16]} at commit {(part.get('git_commit') or '?')[:10]}"
                + (" (uncommitted changes)" if part.get("git_dirty") else "")
                + f", {part.get('elapsed_s', 0) / 60:.0f} min"
                for part in parts
            )
            + ".",
        ]
    floors = floor_table(results, summary)
    if floors:
        lines += ["", floors]
    stamps = stamp_table(summary)
    if stamps:
        lines += ["", stamps]
    firsts = small_syncs.table(results)
    if firsts:
        lines += ["", firsts]
    memory = _service_memory(results)
    if memory:
        lines += ["", memory]
    agent_memory = agent_peaks.sentence(results, steady)
    if agent_memory:
        lines += ["", agent_memory]
    lines += ["", TIME_HEADING, "", time_table(results, time_breakdown(results)).rstrip("\n")]
    skipped = {s: r for w in results["workloads"].values() for s, r in w.get("skipped", {}).items()}
    if skipped:
        lines += ["", "Not run: " + "; ".join(f"`{s}` ({r})" for s, r in skipped.items()) + "."]
    if meta.get("reductions"):
        lines += ["", "Reduced run: " + "; ".join(meta["reductions"]) + "."]
    return "\n".join(lines) + "\n"


def floor_table(results: dict, summary: dict) -> str | None:
    """Each floor method's seconds per workload, the fastest first, and the methods that could
    not run (None when no workload measured a floor: results from before the floors)."""
    rows = []
    for wname, entry in summary.items():
        floor = entry.get("floor")
        if not floor:
            continue
        for method, seconds in sorted(floor["methods"].items(), key=lambda item: item[1]):
            fastest_most = " (fastest most often: the floor)" if method == floor["method"] else ""
            rows.append(f"| {wname} | {method}{fastest_most} | {_seconds(seconds)} |")
        for method, reason in (results["workloads"][wname].get("floor_failed") or {}).items():
            rows.append(f"| {wname} | {method} | did not run: {reason.replace('|', '/')[:160]} |")
    if not rows:
        return None
    return "\n".join(
        [
            "## Floors",
            "",
            "Each method's seconds reading every row of the site query at the source, once per round before "
            "the syncs, median over the steady rounds (tests/benchmarks/floors.py says how each reads); a round's "
            "floor is its fastest method, and *÷ floor* sets each sync against its own round's.",
            "",
            "| workload | method | seconds |",
            "|---|---|---:|",
            *rows,
        ]
    )


def stamp_table(summary: dict) -> str | None:
    """The change-stamp strategies' reads at the source, per round (None when none ran)."""
    rows = [
        f"| {w} | {name} | {_percent(t['x_rows_read'])} | {t['keys_reconciled']:,.0f} | {'yes' if t['index_used'] else 'no'} | {t['reconciled']} "
        f"| {_seconds(t.get('changed_read_s'))} | {_seconds(t.get('key_reconciliation_s'))} | {_seconds(t.get('key_agent_s'))} |"
        for w, entry in summary.items()
        for name, t in entry["strategies"].items()
        if t.get("x_rows_read") is not None
    ]
    if not rows:
        return None
    return "\n".join(
        [
            "Change stamps, steady state (medians): *whole rows read* = rows of the ranged read plus rows fetched "
            "by key, per row of the view; *keys* = keys that travelled in the key reconciliation; *index* = the "
            "source's plan read the stamps through an index; *full* = steady rounds reconciled in full; "
            "*changed read*, *keys* and *keys at agent* = seconds of the ranged read, of the key reconciliation "
            "(which runs beside it) and the agent's share of the latter (— where not timed).",
            "",
            "| workload | strategy | whole rows read | keys | index | full | changed read s | keys s | keys at agent s |",
            "|---|---|---:|---:|:---:|---:|---:|---:|---:|",
            *rows,
        ]
    )


def _seconds(v: float | None) -> str:
    """Seconds for the time table: "—" if not measured, two decimals under ten seconds.

    >>> [_seconds(v) for v in (None, 0.0004, 1.234, 12.34)]
    ['—', '0.00', '1.23', '12.3']
    """
    if v is None:
        return "—"
    return f"{v:.2f}" if v < 10 else f"{v:,.1f}"


def _split(timings: dict) -> str:
    """The agent's split of its time in one cell: "read 0.52 · hash 0.10"; "—" if not reported."""
    if not timings:
        return "—"
    return " · ".join(f"{k.removesuffix('_s')} {_seconds(v)}" for k, v in timings.items())


def time_table(results: dict, breakdown: dict) -> str:
    """The time breakdown as a Markdown table (seconds, steady-state medians), with its legend."""
    steady = steady_rounds(results["meta"]["rounds"])
    lines = [
        f"Seconds, median over rounds {steady[0]}–{steady[-1]}. *sync* = the client's wall time, *in service* = the "
        "service's own (`wall_seconds`); the next four are the sync's steps; *extract steps* = the site extraction's "
        "snapshot · plan · exchange · regroup (summed over the view's sites; the exchange holds the agent's time); "
        "*agent* = the agent's own time answering (`agent_seconds`, summed over its requests, which may run side by "
        "side: a change-stamp strategy's key reconciliation runs beside its changed read), *agent split* its parts where the service reports "
        "them (`agent_timings`; read and convert run in the agent's reader process beside hash and send where the scan reads "
        "ahead, and *wait* is the answer waiting for the reader); *floor* = the fastest bulk read of the site query at "
        "the source by the engine's own export path, same rounds (*Floors* above); *÷ floor* = sync / floor. — where not "
        f"recorded; *{NOT_MEASURED}* in results from before the floors.",
        "",
        "| workload | strategy | sync | in service | extract_sites | build_fragments | assemble_view | commit "
        "| extract steps | agent | agent split | floor | ÷ floor |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for wname, strategies in breakdown.items():
        for sname, b in strategies.items():
            phases, site = b["phases"], b["site_phases"]
            steps = " · ".join(_seconds(site.get(k)) for k in SITE_PHASES) if site else "—"
            lines.append(
                f"| {wname} | {sname} | {_seconds(b['wall_s'])} | {_seconds(b['sync_wall_s'])} | "
                + " | ".join(_seconds(phases.get(k)) for k in SYNC_PHASES)
                + f" | {steps} | {_seconds(b['agent_seconds'])} | {_split(b['agent_timings'])} | "
                f"{_seconds(b['floor']['seconds']) if b['floor'] else NOT_MEASURED} | {_x(b['x_floor'])} |"
            )
    return "\n".join(lines) + "\n"


def plot(results: dict, workload: str, path: Path) -> None:
    """Bytes per round (log scale) with the lower bound, and sync time per round with the floor.

    The no-change sync, if any, is a hollow diamond one round after the last.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogFormatter, LogLocator, MaxNLocator

    w = results["workloads"][workload]
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(12, 4.6))
    for sname, s in w["strategies"].items():
        rounds = [r for r in s["rounds"] if not r.get("error")]
        colour = COLOURS.get(sname)
        ax_b.plot(
            [r["round"] for r in rounds], [r["bytes"] for r in rounds], marker="o", ms=4, label=sname, color=colour
        )
        ax_t.plot(
            [r["round"] for r in rounds], [r["wall_s"] for r in rounds], marker="o", ms=4, label=sname, color=colour
        )
        bad = [r for r in rounds if not r["exact"]]
        if bad:
            ax_b.plot(
                [r["round"] for r in bad],
                [r["bytes"] for r in bad],
                "x",
                color="black",
                ms=9,
                label=f"{sname}: not exact",
            )
        quiet = s.get("no_change")
        if quiet and not quiet.get("error"):
            for ax, value in ((ax_b, quiet["bytes"]), (ax_t, quiet["wall_s"])):
                ax.plot([quiet["round"]], [value], "D", mfc="none", ms=6, color=colour)
    lbs = w.get("lower_bound_bytes", [])
    ax_b.plot(range(len(lbs)), lbs, "k--", label="lower bound (zstd true delta)")
    floors = [fastest(f) for f in w.get("floor_rounds", [])]
    ax_t.plot(
        [i for i, f in enumerate(floors) if f],
        [f[1] for f in floors if f],
        ":",
        color="grey",
        lw=2,
        label="floor: the engine's fastest bulk read" if any(floors) else f"floor {NOT_MEASURED}",
    )
    ax_b.set_yscale("log")
    ax_t.set_yscale("log")  # a load is often 100x a no-change sync
    ax_b.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax_b.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _si_bytes(v)))
    ax_t.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax_t.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g} s"))
    # within one decade matplotlib labels minor ticks too: in seconds, like the major ones
    minor = LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5))
    minor.set_axis(ax_t.yaxis)
    ax_t.yaxis.set_minor_formatter(FuncFormatter(lambda v, pos: f"{v:g} s" if minor(v, pos) else ""))
    ax_b.set_ylabel("bytes on the wire per sync (to + from agent)")
    ax_t.set_ylabel("sync wall time (s), as seen by the client")
    for ax in (ax_b, ax_t):
        ax.set_xlabel("round (0 = initial load)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="both", alpha=0.3)
    # One legend under both panels, so no line is hidden behind it.
    handles, labels = ax_b.get_legend_handles_labels()
    if any(s.get("no_change") for s in w["strategies"].values()):
        handles.append(Line2D([], [], ls="none", marker="D", mfc="none", color="black"))
        labels.append("no-change sync (hollow)")
    scan = ax_t.get_legend_handles_labels()
    handles.append(scan[0][-1])
    labels.append(scan[1][-1])
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    meta = results["meta"]
    fig.suptitle(f"{workload}: {w['rows']:,} rows, {meta['rounds']} rounds — {w.get('description', '')}", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict, out: Path) -> dict:
    """Write `out` (JSON), `<name>-<workload>.png` beside it and `<name>.md`; returns their paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = summarize(results)
    results["summary"] = summary
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    written = {"json": out}
    for wname, w in results["workloads"].items():
        if w.get("strategies") and any(s["rounds"] for s in w["strategies"].values()):
            path = out.with_name(f"{out.stem}-{wname}.png")
            plot(results, wname, path)
            written[f"png:{wname}"] = path
    md = out.with_suffix(".md")
    md.write_text(markdown(results, summary))
    written["md"] = md
    return written
