"""The agent's peak memory per kind of sync (load, first sync after it, steady, no-change), for the results page.

The figure that counts for a deployment is the agent's whole process tree: the agent
process, the fork server of its readers and the reader of each scan (readahead.py),
their proportional set sizes summed (each page shared between them counted once),
sampled every 0.2 s. The agent process's own peak RSS (VmHWM, reset before each sync)
follows in brackets: it counts the pages of the libraries it shares with its readers.
"""

from __future__ import annotations


def _mib(kb: int | None) -> str:
    return "—" if kb is None else f"{kb / 1024:,.0f} MiB"


def _peak(records: list[dict], field: str) -> int | None:
    values = [r[field] for r in records if r.get(field)]
    return max(values) if values else None


def by_sync_kind(entry: dict, steady: list[int]) -> dict[str, tuple[int | None, int | None]]:
    """(tree PSS, agent RSS) peaks in kB of one strategy's syncs, by kind; steady is the
    highest of the steady rounds.

    >>> syncs = [{"round": r, "agent_tree_peak_pss_kb": 1024 * (r + 1), "agent_peak_rss_kb": 512} for r in range(4)]
    >>> by_sync_kind({"rounds": syncs}, [2, 3])
    {'load': (1024, 512), 'first sync': (2048, 512), 'steady': (4096, 512)}
    """
    records = {r["round"]: r for r in entry.get("rounds", [])}
    kinds = {"load": [records.get(0)], "first sync": [records.get(1)], "steady": [records.get(r) for r in steady]}
    if entry.get("no_change"):
        kinds["no-change"] = [entry["no_change"]]
    out = {}
    for kind, picked in kinds.items():
        present = [r for r in picked if r]
        if present:
            out[kind] = (_peak(present, "agent_tree_peak_pss_kb"), _peak(present, "agent_peak_rss_kb"))
    return out


def sentence(results: dict, steady: list[int]) -> str | None:
    """One sentence on the agent's peaks per workload, strategy and kind of sync (`steady`:
    the steady rounds); None before they were measured."""
    parts = []
    for wname, workload in results["workloads"].items():
        for sname, entry in workload.get("strategies", {}).items():
            peaks = by_sync_kind(entry, steady)
            if any(pss for pss, _ in peaks.values()):
                shown = ", ".join(f"{kind} {_mib(pss)} ({_mib(rss)})" for kind, (pss, rss) in peaks.items())
                parts.append(f"{wname} · {sname}: {shown}")
    if not parts:
        return None
    return (
        "Agent peak per sync (the agent process, its readers' fork server and the scan's reader, PSS summed, "
        "sampled every 0.2 s; in brackets the agent process's own peak RSS): " + "; ".join(parts) + "."
    )
