"""What each sync costs the shared catalog, on a catalog of many scheduled views.

Every sync writes its record several times (queued, running, its progress, its end), each
under the catalog's lock, which the scheduler, every other sync and the API share. This
times those writes one by one (a call's time is about the time it holds the lock: nothing
else runs here), and the runner's queueing of a burst of scheduled syncs while the pool is
full (all views due at once, as after a start), on a catalog of `--views` views with a few
finished syncs each. No Spark, no agent: the catalog and the runner's queue only.

    nice -n 19 .venv/bin/python -m tests.benchmarks.catalog_writes --views 5000
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

from service.catalog import Catalog, now
from service.jobs import SyncRunner, _Running
from service.scheduler import Scheduler
from service.settings import ServiceSettings
from service.slots import Waiting, startable
from warehouse.cancellation import Cancellation
from warehouse.view_options import ViewOptions

SOURCES = 50
HISTORY = 5
#: Times the decision of a sync's end is taken, to time it
DECISIONS = 20


def build(path: Path, views: int) -> Catalog:
    """A catalog of `views` views scheduled every 300 s over SOURCES sources, each with HISTORY finished syncs."""
    catalog = Catalog(path)
    options = ViewOptions.from_stored({"strategy": "auto", "schedule": {"every_s": 300}})
    catalog._conn.execute("PRAGMA synchronous = OFF")  # the set-up only
    for i in range(views):
        definition = {"sites": [{"source": f"src{i % SOURCES}"}]}
        catalog.add_view(f"v{i:05}", f"SELECT t.id FROM src{i % SOURCES}.t{i} t", definition, options)
        for _ in range(HISTORY):
            sync = catalog.queue_sync(f"v{i:05}", "schedule")
            catalog.update_sync(
                sync.id, status="succeeded", started_at=now(), finished_at=now(), metrics={"rows_after": 1000}
            )
    catalog._conn.execute("PRAGMA synchronous = FULL")
    return catalog


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return f"median {statistics.median(ordered) * 1e3:6.2f} ms  p95 {p95 * 1e3:6.2f} ms"


def sync_writes(catalog: Catalog, syncs: int) -> dict[str, list[float]]:
    """Time one scheduled sync's writes, as jobs.py makes them, for `syncs` views in turn."""
    times: dict[str, list[float]] = {k: [] for k in ("queued", "running", "progress", "final", "total")}
    for i in range(syncs):
        view = f"v{i:05}"
        t0 = time.perf_counter()
        record = catalog.queue_sync(view, "schedule")
        t1 = time.perf_counter()
        catalog.set_running(record.id, now(), 0.0)
        t2 = time.perf_counter()
        for phase in ("plan", "compare", "commit"):
            catalog.set_progress(record.id, {"phase": phase})
        t3 = time.perf_counter()
        catalog.update_sync(
            record.id, status="succeeded", finished_at=now(), metrics={"rows_after": 1000}, progress=None
        )
        t4 = time.perf_counter()
        for key, spent in zip(times, (t1 - t0, t2 - t1, (t3 - t2) / 3, t4 - t3, t4 - t0), strict=True):
            times[key].append(spent)
    return times


def burst(path: Path, views: int) -> tuple[float, int, dict[str, tuple[float, float]]]:
    """Seconds the scheduler's one look takes to queue every view's sync while the pool is full
    (two syncs of another source run and end never): as after a start with every view due; and
    the seconds the runner's decision takes when one of them ends, with all those syncs queued
    (its time, and its CPU time: a busy machine stretches the first), as the runner takes it
    (`kept`: slots.startable on its FairQueue) and by the definition (`sorted`: slots.startable,
    which sorts the whole queue, as the runner did before)."""
    catalog = Catalog(path)
    settings = ServiceSettings(data_dir=path.parent / "data", max_concurrent_syncs=2)
    runner = SyncRunner(settings, catalog, engine=None)
    for k in range(2):  # the pool's slots, held: nothing queued starts
        waiting = Waiting(f"busy{k}", frozenset({"elsewhere"}), now())
        runner.running[waiting.id] = _Running(waiting, Cancellation())
    scheduler = Scheduler(catalog, runner)
    t0 = time.perf_counter()
    scheduler.tick(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    spent = time.perf_counter() - t0
    queued = len(runner.queue)
    # a sync ends: one slot frees, and the runner asks which queued sync takes it
    waiting, running = [q.waiting for q in runner.queue.values()], [next(iter(runner.running.values())).waiting]
    decisions = {
        "kept": lambda: startable(runner.fair, running, 2, settings.max_syncs_per_source, 1),
        "sorted": lambda: startable(waiting, running, 2, settings.max_syncs_per_source, 1),
    }
    assert decisions["kept"]() == decisions["sorted"](), "the kept order chose otherwise than the definition"
    decision = {}
    for name, decide in decisions.items():
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(DECISIONS):
            decide()
        decision[name] = ((time.perf_counter() - t0) / DECISIONS, (time.process_time() - cpu0) / DECISIONS)
    runner.queue.clear()
    runner.fair.clear()
    runner.running.clear()
    runner.pool.shutdown(wait=True)
    catalog.close()
    return spent, queued, decision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=5000)
    parser.add_argument("--syncs", type=int, default=300, help="syncs timed one by one")
    parser.add_argument("--dir", type=Path, default=None, help="where the catalog goes (a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "catalog.db"
        catalog = build(path, args.views)
        times = sync_writes(catalog, args.syncs)
        catalog.close()
        print(f"catalog of {args.views} views, {args.syncs} scheduled syncs, one at a time:")
        for key, samples in times.items():
            print(f"  {key:9} {_ms(samples)}")
        spent, queued, decision = burst(path, args.views)
        print(
            f"one scheduler look queueing {queued} due syncs, pool full: {spent:.2f} s ({spent / queued * 1e3:.2f} ms a sync)"
        )
        for name, (spent, cpu) in decision.items():
            print(
                f"a sync ends with {queued} queued: the runner's decision ({name}) takes {spent * 1e3:.3f} ms"
                f" ({cpu * 1e3:.3f} ms of CPU)"
            )


if __name__ == "__main__":
    main()
