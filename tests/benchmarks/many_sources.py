"""Many sources on one service (#52): what the service holds as sources are added and while their
scheduled syncs run.

    python -m tests.benchmarks.many_sources --sources 50 --tables 20 --rows 200 --every-s 300 --minutes 10

Each source is a SQLite file of small tables with an agent process of its own (workloads/fleet.py).
The sources are registered one after another, each mirrored with a schedule; after each, and then
every few seconds while a writer changes a row of a random table now and then, the service's
/metrics is read: its threads, open files, TCP connections (accepted and opened), its memory and
its Spark JVM's, the syncs it has finished. The bound is that threads and connections do not grow
with the sources: the summary sets the readings with every source in beside those with the first.
"""

from __future__ import annotations

import argparse
import random
import shutil
import time
from pathlib import Path

from tests.benchmarks import machine
from workloads.fleet import Fleet, reading, touch
from workloads.harness import Api, start_service

WORK = Path(__file__).resolve().parent / "work" / "many-sources"
OUT = Path(__file__).resolve().parent / "results" / "many-sources.json"
#: Figures whose highest value the summary gives, and the same with the first source only.
#: Longest wait for the first source's views to be synced once before the others are added.
FIRST_WITHIN_S = 600
BOUNDED = ("threads", "open_files", "connections_opened", "connections_accepted", "rss_bytes", "tree_rss_bytes")


def summarize(samples: list[dict], sources: int) -> dict:
    """Each bounded figure's highest reading with one source in and over the whole run; syncs done.

    >>> s = [{"sources": 1, "t_s": 0, "threads": 30, "syncs_succeeded": 0, "syncs_failed": 0},
    ...      {"sources": 2, "t_s": 60, "threads": 31, "syncs_succeeded": 40, "syncs_failed": 0}]
    >>> out = summarize(s, 2)
    >>> out["threads, one source"], out["threads, all sources"], out["syncs_succeeded"], out["syncs_a_minute"]
    (30, 31, 40, 40.0)
    """
    first = [s for s in samples if s["sources"] == 1]
    out: dict = {"sources": sources}
    for figure in BOUNDED:
        values = [s[figure] for s in samples if s.get(figure) is not None]
        if values:
            out[f"{figure}, one source"] = max((s[figure] for s in first if s.get(figure) is not None), default=None)
            out[f"{figure}, all sources"] = max(values)
    last = samples[-1]
    out["syncs_succeeded"] = last["syncs_succeeded"]
    out["syncs_failed"] = last["syncs_failed"]
    minutes = (last["t_s"] - samples[0]["t_s"]) / 60
    out["syncs_a_minute"] = round(last["syncs_succeeded"] / minutes, 1) if minutes > 0 else None
    return out


def markdown(out: dict) -> str:
    s = out["summary"]
    lines = [
        f"# Many sources: {out['sources']} × {out['tables']} tables of {out['rows']:,} rows, every {out['every_s']} s",
        "",
        f"{out['date']}, commit {out['commit']}. Highest reading with one source in, and over the whole run:",
        "",
        "| figure | one source | all sources |",
        "|---|---:|---:|",
    ]
    for figure in BOUNDED:
        if f"{figure}, all sources" in s:
            lines.append(f"| {figure} | {s[f'{figure}, one source']} | {s[f'{figure}, all sources']} |")
    lines += [
        "",
        f"Syncs: {s['syncs_succeeded']} succeeded, {s['syncs_failed']} failed, {s['syncs_a_minute']} a minute.",
    ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, log=print) -> dict:
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    fleet = Fleet(args.work / "sources", args.sources, args.tables, args.rows)
    started = time.monotonic()
    samples: list[dict] = []
    service = start_service(args.work / "warehouse", args.work)
    api = Api(service.url, timeout=600)
    rng = random.Random(args.seed)
    try:
        fleet.start()
        log(f"{args.sources} agents up in {time.monotonic() - started:.0f} s")

        def sample(sources: int) -> None:
            samples.append({"t_s": round(time.monotonic() - started, 1), "sources": sources, **reading(api)})

        fleet.add(api, 0, args.every_s)
        # the first source's views synced once: what one source holds, its syncs' threads included
        deadline = time.monotonic() + FIRST_WITHIN_S
        while time.monotonic() < deadline:
            sample(1)
            if samples[-1]["syncs_succeeded"] + samples[-1]["syncs_failed"] >= args.tables:
                break
            time.sleep(2)
        log(f"source 1: {samples[-1]}")
        for i in range(1, args.sources):
            fleet.add(api, i, args.every_s)
            sample(i + 1)
            log(f"source {i + 1}: {samples[-1]}")
        end = time.monotonic() + args.minutes * 60
        next_sample = time.monotonic()
        while time.monotonic() < end:
            i = rng.randrange(args.sources)
            touch(fleet.files[i], f"t{rng.randrange(args.tables):02d}", args.changes, rng)
            if time.monotonic() >= next_sample:
                sample(args.sources)
                log(f"{samples[-1]}")
                next_sample += args.sample_s
            time.sleep(args.write_every_s)
        sample(args.sources)
    finally:
        api.close()
        service.stop()
        fleet.stop()
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    return {
        "date": machine.describe()["date"],
        "machine": machine.describe(),
        "sources": args.sources,
        "tables": args.tables,
        "rows": args.rows,
        "every_s": args.every_s,
        "summary": summarize(samples, args.sources),
        "readings": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.many_sources", description=__doc__.split("\n")[0])
    parser.add_argument("--sources", type=int, default=50)
    parser.add_argument("--tables", type=int, default=20, help="tables of each source, each mirrored")
    parser.add_argument("--rows", type=int, default=200, help="rows of each table")
    parser.add_argument("--every-s", type=int, default=300, help="each view's schedule")
    parser.add_argument("--minutes", type=float, default=10, help="how long the schedules run once every source is in")
    parser.add_argument("--sample-s", type=float, default=10, help="seconds between two readings of /metrics")
    parser.add_argument("--write-every-s", type=float, default=1.0, help="seconds between two writes")
    parser.add_argument("--changes", type=int, default=2, help="rows a write changes")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, sources, warehouse)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    machine.save(run(args), args, "tests.benchmarks.many_sources", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
