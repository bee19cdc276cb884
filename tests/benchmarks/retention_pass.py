"""What a round of retention costs on a catalog of many views, few of which have syncs to remove.

Every view has HISTORY succeeded syncs, each with a committed version and a delta (small stand-in
files: a removal's cost is in its catalog writes and file-system calls, not in bytes), and the
policy keeps HISTORY syncs a view, so nothing goes. Then `--removable` views get one sync more,
and the round after removes the oldest sync of each. Times the service's first round (which also
sweeps every view for what a crash left), the round that removes, and an idle round after.
No Spark, no agent: the catalog, the view stores and the retention task only.

    nice -n 19 .venv/bin/python -m tests.benchmarks.retention_pass --views 5000 --removable 500
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from service.catalog import Catalog, now
from service.readers import Readers
from service.retention import RetentionTask
from service.retention_policy import Keep
from warehouse.formats import STORAGE_FORMAT
from warehouse.store.versions import ViewStore
from warehouse.view_options import ViewOptions

#: Syncs of each view, all kept by the policy until one more comes.
HISTORY = 3


def commit(catalog: Catalog, store: ViewStore, number: int) -> None:
    """One succeeded sync of the store's view that committed version `number` and a delta (its
    record written straight into the catalog's table, without waiting for the disk: the set-up
    of thousands of views, on a busy machine, is what would take long here otherwise)."""
    sync_id, stamp = uuid.uuid4().hex, now()
    with catalog._lock:
        catalog._conn.execute(
            "INSERT INTO syncs (id, view, status, created_at, started_at, finished_at, trigger)"
            " VALUES (?, ?, 'succeeded', ?, ?, ?, 'schedule')",
            (sync_id, store.view, stamp, stamp, stamp),
        )
    version = store.root / "versions" / str(number)
    version.mkdir(parents=True)
    (version / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "sync_id": sync_id}))
    store.delta(sync_id).mkdir(parents=True)
    (store.delta(sync_id) / "part-0.parquet").write_bytes(b"x" * 64)
    (store.root / "CURRENT").write_text(json.dumps({"format": STORAGE_FORMAT, "version": number, "sync_id": sync_id}))


def timed(task: RetentionTask) -> tuple[float, float, int]:
    """One round: its seconds, its CPU seconds and the syncs it removed."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    removed = task.run_once()
    return time.perf_counter() - t0, time.process_time() - cpu0, removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=5000)
    parser.add_argument("--removable", type=int, default=500, help="views with one sync to remove")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the catalog and stores go (a temporary directory)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        catalog = Catalog(root / "catalog.db")
        options = ViewOptions.from_stored({"strategy": "auto", "schedule": {"every_s": 300}})
        stores = {}
        catalog._conn.execute("PRAGMA synchronous = OFF")  # the set-up only
        for i in range(args.views):
            name = f"v{i:05}"
            catalog.add_view(name, "SELECT 1", {"sites": [{"source": "s"}]}, options)
            stores[name] = ViewStore(root / "data", name)
            for number in range(1, HISTORY + 1):
                commit(catalog, stores[name], number)
        catalog._conn.execute("PRAGMA synchronous = FULL")
        task = RetentionTask(catalog, stores.__getitem__, Readers(), Keep(count=HISTORY), 3600)
        rounds = {"first (nothing to remove)": timed(task)}
        catalog._conn.execute("PRAGMA synchronous = OFF")
        for name in list(stores)[: args.removable]:
            commit(catalog, stores[name], HISTORY + 1)
        catalog._conn.execute("PRAGMA synchronous = FULL")
        rounds[f"{args.removable} syncs to remove"] = timed(task)
        rounds["idle after"] = timed(task)
        catalog.close()
    print(f"retention on {args.views} views of {HISTORY} syncs each:")
    for name, (spent, cpu, removed) in rounds.items():
        print(f"  {name:28} {spent:7.3f} s  ({cpu:6.3f} s of CPU)  removed {removed}")


if __name__ == "__main__":
    main()
