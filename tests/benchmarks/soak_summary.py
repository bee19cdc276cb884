"""The soak benchmark's figures, from what it recorded: growth over the second half, queue waits, syncs per minute.

Pure functions of the samples and sync records `tests.benchmarks.soak` collected, so that
the headline and its verdicts can be checked without running 30 minutes of it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable

#: The goal of #38: the service's memory and the data directory grow at most this share over the second half.
GROWTH_GOAL = 0.05
#: The windows growth compares, as shares of the run: around its middle, and its last tenth.
MIDDLE, END = (0.45, 0.55), (0.90, 1.00)


def growth(samples: Iterable[tuple[float, float]], start: float, end: float) -> dict:
    """How much a sampled figure grew over the second half of [start, end]: the median of its
    samples in the run's last tenth over the median of those around its middle (45 % to 55 %).

    Medians of windows, not two single samples, so that one sync's passing peak does not
    decide it. `samples` are (time, value).

    >>> s = [(t, 100 + t) for t in range(0, 101)]  # grows by 1 a second
    >>> growth(s, 0, 100)
    {'middle': 150, 'end': 195, 'growth': 0.3, 'met': False}
    >>> growth([(t, 100.0) for t in range(0, 101)], 0, 100)["met"]
    True
    >>> growth([], 0, 100)
    {'middle': None, 'end': None, 'growth': None, 'met': None}
    """
    samples = list(samples)
    span = end - start

    def window(share: tuple[float, float]) -> float | None:
        lo, hi = start + share[0] * span, start + share[1] * span
        inside = [v for t, v in samples if lo <= t <= hi]
        return statistics.median(inside) if inside else None

    middle, last = window(MIDDLE), window(END)
    if middle is None or last is None or middle == 0:
        return {"middle": middle, "end": last, "growth": None, "met": None}
    share = round((last - middle) / middle, 4)
    return {"middle": middle, "end": last, "growth": share, "met": share <= GROWTH_GOAL}


def queue_waits(syncs: Iterable[dict]) -> dict:
    """Longest, median and 95th percentile of the syncs' `queued_s` (those that started).

    >>> queue_waits([{"queued_s": 0.5}, {"queued_s": 3.0}, {"queued_s": None}, {"queued_s": 1.0}])
    {'started': 3, 'median_s': 1.0, 'p95_s': 3.0, 'longest_s': 3.0}
    >>> queue_waits([])
    {'started': 0, 'median_s': None, 'p95_s': None, 'longest_s': None}
    """
    waits = sorted(s["queued_s"] for s in syncs if s.get("queued_s") is not None)
    if not waits:
        return {"started": 0, "median_s": None, "p95_s": None, "longest_s": None}
    p95 = waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]
    return {
        "started": len(waits),
        "median_s": round(statistics.median(waits), 3),
        "p95_s": round(p95, 3),
        "longest_s": round(waits[-1], 3),
    }


def _at(iso: str | None) -> float | None:
    return dt.datetime.fromisoformat(iso).timestamp() if iso else None


def in_fault(at: float | None, faults: Iterable[dict], grace_s: float) -> bool:
    """Whether `at` (seconds into the run) falls in a fault's window: from the kill (`at_s`) until
    `grace_s` after the process answered again (`outage_s` later).

    >>> fault = {"at_s": 100.0, "outage_s": 4.0}
    >>> in_fault(105.0, [fault], 5.0), in_fault(110.0, [fault], 5.0), in_fault(None, [fault], 5.0)
    (True, False, False)
    """
    return at is not None and any(f["at_s"] <= at <= f["at_s"] + f["outage_s"] + grace_s for f in faults)


def failure_label(sync: dict) -> str:
    """What a failed sync is counted as: its error_code, or, for a failure without one, the
    first clause of its error with addresses and numbers left out.

    >>> failure_label({"error_code": "cancelled", "error": "cancelled"})
    'cancelled'
    >>> failure_label({"error_code": None, "error": "agent at http://127.0.0.1:33425 unreachable or connection broken: ConnectError: [Errno 111]"})
    'agent at URL unreachable or connection broken'
    """
    if sync.get("error_code"):
        return sync["error_code"]
    error = re.sub(r"https?://\S+", "URL", sync.get("error") or "unknown")
    return re.sub(r"\d+", "N", error.split(": ")[0])[:80]


def failures(
    syncs: Iterable[dict], faults: list[dict], grace_s: float, start: float = 0.0, end: float = float("inf")
) -> dict:
    """The syncs that failed within the run (from `start` to `end`, epoch seconds), by error
    code, split into those that ended during a fault and the others.

    >>> syncs = [
    ...     {"status": "failed", "error_code": "agent_unreachable", "finished_at": "1970-01-01T00:01:42+00:00"},
    ...     {"status": "failed", "error_code": "interrupted", "finished_at": "1970-01-01T00:05:00+00:00"},
    ...     {"status": "succeeded", "error_code": None, "finished_at": "1970-01-01T00:01:43+00:00"},
    ... ]
    >>> failures(syncs, [{"at_s": 100.0, "outage_s": 4.0}], 5.0)
    {'during_faults': 1, 'outside_faults': 1, 'codes_during': {'agent_unreachable': 1}, 'codes_outside': {'interrupted': 1}}
    """
    during: Counter = Counter()
    outside: Counter = Counter()
    for s in syncs:
        if s["status"] != "failed":
            continue
        at = _at(s["finished_at"])
        if at is None or not start <= at <= end:
            continue
        target = during if in_fault(at - start, faults, grace_s) else outside
        target[failure_label(s)] += 1
    return {
        "during_faults": sum(during.values()),
        "outside_faults": sum(outside.values()),
        "codes_during": dict(sorted(during.items())),
        "codes_outside": dict(sorted(outside.items())),
    }


def per_minute(syncs: Iterable[dict], start: float, end: float) -> float:
    """Syncs that succeeded between `start` and `end` (epoch seconds), per minute.

    >>> per_minute([{"status": "succeeded", "finished_at": "1970-01-01T00:00:30+00:00"}] * 3, 0.0, 60.0)
    3.0
    """
    done = sum(1 for s in syncs if s["status"] == "succeeded" and start <= (_at(s["finished_at"]) or -1) <= end)
    return round(60 * done / (end - start), 2)


def summarize(out: dict) -> dict:
    """The headline: views, syncs, their rate against the schedules', failures, queue waits,
    exactness, stuck syncs, 5xx answers, and the growth of memory and data directory."""
    start, end = out["run"]["started_at"], out["run"]["ended_at"]
    # the syncs that ended within the run: not those the final restart interrupted, nor the final ones
    syncs = [s for s in out["syncs"].values() if start <= (_at(s["finished_at"]) or -1) <= end]
    views = out["views"]
    period = out["settings"]["every_s"]
    statuses = Counter(s["status"] for s in syncs)
    fault_list = out["faults"]
    memory = growth(((t, kb) for t, kb, _ in out["samples"] if kb is not None), start, end)
    disk = growth(((t, b) for t, _, b in out["samples"]), start, end)
    answered = {int(k): v for k, v in out["client"]["statuses"].items()}
    checked = out["check"]
    return {
        "views": len(views),
        "sources": len({v["source"] for v in views.values()}),
        "minutes": round((end - start) / 60, 1),
        "every_s": period,
        "syncs_seen": len(syncs),
        "succeeded": statuses.get("succeeded", 0),
        "failed": statuses.get("failed", 0),
        "syncs_per_minute": per_minute(syncs, start, end),
        "schedules_ask_per_minute": round(60 * len(views) / period, 1),
        "queue": queue_waits(syncs),
        "failures": failures(syncs, fault_list, out["settings"]["fault_grace_s"], start, end),
        "faults": dict(Counter(f["kind"] for f in fault_list)),
        "writer": out["writer"],
        "final_syncs": out.get("final", {}),
        "views_exact": checked["exact"],
        "views_not_exact": checked["differ"],
        "stuck": out["stuck"],
        "answers_5xx": sum(n for code, n in answered.items() if code >= 500),
        "answers": dict(sorted(answered.items())),
        "service_log_tracebacks": out["service_log"]["tracebacks"],
        "service_log_5xx": out["service_log"]["lines_5xx"],
        "memory_kb": memory,
        "data_dir_bytes": disk,
        "retention": out["retention"],
    }


def _met(g: dict) -> str:
    if g["growth"] is None:
        return "not measured (too few samples)"
    verdict = "met" if g["met"] else "NOT met"
    return f"{100 * g['growth']:+.1f} % ({verdict}, goal ≤ {100 * GROWTH_GOAL:.0f} %)"


def findings(s: dict) -> list[str]:
    """What the figures say, in sentences made from them."""
    q, f = s["queue"], s["failures"]
    keeps = "kept up with" if q["p95_s"] is not None and q["p95_s"] < s["every_s"] else "did NOT keep up with"
    codes = ", ".join(f"{c} {n}" for c, n in f["codes_during"].items()) or "none"
    outside = ", ".join(f"{c} {n}" for c, n in f["codes_outside"].items()) or "none"
    exact = (
        f"all {s['views']} views exact"
        if not s["views_not_exact"]
        else f"{len(s['views_not_exact'])} of {s['views']} views NOT exact"
    )
    writer = s["writer"]
    wrote = (
        f"the writer DIED ({writer['died']})"
        if "died" in writer
        else f"the writer made {sum(v for k, v in writer.items() if not k.startswith('error')):,} transactions "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(writer.items()))})"
    )
    mem, disk = s["memory_kb"], s["data_dir_bytes"]
    mib = lambda v, unit: "—" if v is None else f"{v / unit:,.0f} MiB"  # noqa: E731
    return [
        f"{s['views']} views over {s['sources']} sources, each scheduled every {s['every_s']} s, for "
        f"{s['minutes']} minutes: {s['syncs_seen']:,} syncs ({s['succeeded']:,} succeeded, {s['failed']:,} failed), "
        f"{s['syncs_per_minute']} succeeded a minute; the pool {keeps} the schedules (95 % of the syncs waited "
        f"{q['p95_s']} s or less in the queue; median {q['median_s']} s, longest {q['longest_s']} s).",
        f"Faults injected (SIGKILL, then a restart): {s['faults']}. Syncs failed during them: {f['during_faults']} "
        f"({codes}); outside them: {f['outside_faults']} ({outside}).",
        f"Afterwards ({wrote}), the writer stopped and each view synced once more: {exact} against its table read "
        f"straight from the source; syncs stuck: {len(s['stuck'])}; answers 5xx: {s['answers_5xx']} of "
        f"{sum(s['answers'].values()):,}; tracebacks in the service's log: {s['service_log_tracebacks']}.",
        f"The service's memory (its process and Spark JVM): {mib(mem['middle'], 1024)} around the middle, "
        f"{mib(mem['end'], 1024)} at the end (medians of the windows): {_met(mem)}. The data directory: "
        f"{mib(disk['middle'], 2**20)}, then {mib(disk['end'], 2**20)}: {_met(disk)}.",
        f"Retention (SERVICE_KEEP_DELTAS={s['retention']['keep']}): {s['retention']['records_held']} sync records "
        f"held at the end for {s['syncs_seen']:,} syncs seen, at most {s['retention']['most_deltas_in_a_view']} "
        f"deltas kept by one view; a removed sync answered {s['retention']['removed_answers']}.",
    ]


def timeline(syncs: Iterable[dict], samples: Iterable[tuple], start: float, end: float) -> list[dict]:
    """Per minute of the run: syncs that ended (succeeded, failed), their median queue wait,
    and the last memory and data directory sample.

    >>> syncs = [{"status": "succeeded", "finished_at": "1970-01-01T00:00:10+00:00", "queued_s": 2.0},
    ...          {"status": "failed", "finished_at": "1970-01-01T00:01:10+00:00", "queued_s": None}]
    >>> timeline(syncs, [(5.0, 1000, 10), (65.0, None, 12)], 0.0, 120.0)
    [{'minute': 1, 'succeeded': 1, 'failed': 0, 'median_wait_s': 2.0, 'memory_kb': 1000, 'data_dir_bytes': 10}, \
{'minute': 2, 'succeeded': 0, 'failed': 1, 'median_wait_s': None, 'memory_kb': None, 'data_dir_bytes': 12}]
    >>> [r["memory_kb"] for r in timeline([], [(60.2, 7, 1)], 0.0, 60.5)]  # a run a fraction over a minute
    [None, 7]
    """
    minutes = max(1, math.ceil((end - start) / 60))  # a partial last minute is a minute
    rows = [
        {"minute": m + 1, "succeeded": 0, "failed": 0, "median_wait_s": None, "memory_kb": None, "data_dir_bytes": None}
        for m in range(minutes)
    ]
    waits: list[list[float]] = [[] for _ in range(minutes)]
    for s in syncs:
        at = _at(s["finished_at"])
        if at is None or not start <= at < end or s["status"] not in ("succeeded", "failed"):
            continue
        m = int((at - start) // 60)
        rows[m][s["status"]] += 1
        if s.get("queued_s") is not None:
            waits[m].append(s["queued_s"])
    for m, w in enumerate(waits):
        rows[m]["median_wait_s"] = round(statistics.median(w), 3) if w else None
    for t, kb, size in samples:
        if start <= t < end:
            m = int((t - start) // 60)
            rows[m]["memory_kb"], rows[m]["data_dir_bytes"] = kb, size
    return rows


def markdown(out: dict) -> str:
    """The results as a page: the command, the findings, the summary, the faults and the minutes."""
    s = out["summary"]
    lines = [
        f"# Soak: {s['views']} mirrored views, {s['minutes']} minutes, faults injected",
        "",
        f"Command: `{out['command']}` at commit {out['commit']}, {out['date']}.",
        "",
        *(f"- {f}" for f in out["findings"]),
        "",
        "| figure | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in s.items() if not isinstance(v, dict | list)),
        "",
        "| fault | target | at (s into the run) | down (s) | answered again after (s) |",
        "|---|---|---:|---:|---:|",
    ]
    for f in out["faults"]:
        lines.append(f"| {f['kind']} | {f['target']} | {f['at_s']:.0f} | {f['down_s']} | {f['outage_s']} |")
    return "\n".join([*lines, "", *minutes_table(out["minutes"])]) + "\n"


def minutes_table(minutes: list[dict]) -> list[str]:
    """The timeline's rows as a Markdown table."""
    lines = [
        "| minute | succeeded | failed | median wait s | memory kB | data dir bytes |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for m in minutes:
        lines.append(
            f"| {m['minute']} | {m['succeeded']} | {m['failed']} | {m['median_wait_s']} | {m['memory_kb']} | "
            f"{m['data_dir_bytes']} |"
        )
    return lines
