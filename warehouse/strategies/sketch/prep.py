"""Sketch tables built in the background after a commit, so that no sync builds one inline.

A sketch sync needs its fragment's table (sketch_tables.py). Most syncs keep it up to date in
O(changes), but after some commits the next sync would have to build one from the whole
fragment: after a load, after a fragment written by another strategy (auto, a fall-back,
an audit), when the table's secret is due for rotation, or when the fragment outgrew it.
`Preparations.after_commit` queues such a build as soon as the commit is visible: one
background thread, the sync's own Spark session (its jobs in a scheduler pool of their
own, `POOL`, so that a sync's tasks share the cores with a running build rather than queue
behind its whole stage), a new secret. The table is written to a temporary directory in
the version's site directory and renamed to `sketch-prepared/` once complete; its metadata
names the version (number and sync id) whose fragment it holds. A sync uses a prepared
table only for exactly that version, and only whole: a crash mid-build leaves at most a
temporary directory, which `ViewStore.cleanup` removes at the next start.

A sync that needs a new table (`Preparations.take`) finds its build
- finished: it uses the table, which costs it one read of the file;
- running: it waits for it, at most `wait_s`. The build runs on the same cores and was
  started when the previous sync committed, so it ends sooner than a second build of the
  same table started now would, and that second build would slow it down; past `wait_s`
  (a build that hangs) the sync cancels it and builds the table itself;
- queued behind other views' builds: the sync takes it over and builds it at once;
- failed, or never started (a restarted service): the sync builds the table itself.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from warehouse import faults
from warehouse.defaults import SKETCH_PREPARE_WAIT_S
from warehouse.planning import update_counts
from warehouse.store import layers
from warehouse.store.versions import TMP_MARK, Version, fsync_dir, fsync_file
from warehouse.strategies.sketch import tables as sketch_tables
from warehouse.viewdef import SiteQuery

log = logging.getLogger("warehouse.strategies.sketch.prep")

#: Spark scheduler pool of the background builds (the session schedules pools FAIR).
POOL = "sketch-prepare"
#: Where a prepared table is published, in the version's site directory.
PREPARED = "sketch-prepared"
#: The fault point (faults.py) inside a build: the table is written, not yet published.
#: Not among faults.POINTS, which a sync reaches.
BUILT = "sketch_prepared_written"

QUEUED, RUNNING, TAKEN = "queued", "running", "taken"


def prepared_dir(version: Version, site: int) -> Path:
    return version.site_dir(site) / PREPARED


def fragment_rows(version: Version, site: int) -> int:
    """Rows of a site's fragment as the next sync's statistics count them (the update-statistics histogram)."""
    return update_counts.totals(update_counts.load(version.site_dir(site))).tuples


def needs_table(version: Version, site: int, rotation: int) -> bool:
    """Whether the next sketch sync of `site` after `version` would build a table: none is
    stored or prepared, or the stored one cannot serve (sketch_tables.needs_new_table). A
    prepared table of another version (a build for a view since redefined, which published
    into the new version's directory) is removed: it would stand in the way of this one."""
    rows = fragment_rows(version, site)
    if prepared_dir(version, site).exists():
        if load_prepared(version, site, rows) is not None:
            return False
        shutil.rmtree(prepared_dir(version, site), ignore_errors=True)
    state = sketch_tables.SiteSketch.peek(sketch_tables.sketch_dir(version, site))
    return state is None or sketch_tables.needs_new_table(*state, rows, rotation)


def load_prepared(version: Version, site: int, rows: int) -> sketch_tables.SiteSketch | None:
    """The table prepared for `site` of exactly `version`, or None: absent, built for another
    version (a number reused after a crash, a redefined view), or unreadable."""
    try:
        table = sketch_tables.SiteSketch.load(prepared_dir(version, site))
    except (OSError, ValueError, KeyError) as exc:
        log.warning("ignoring the prepared sketch table of %s site %d: %s", version.path, site, exc)
        return None
    if table is None or table.built_for != (version.number, version.sync_id):
        return None
    if table.syncs or table.table.width != sketch_tables.stored_width(rows):
        return None  # not what the sync would build itself
    return table


def build(
    spark: SparkSession, version: Version, site: int, query: SiteQuery, rows: int, arrow: bool = False
) -> sketch_tables.SiteSketch:
    """A new table of a site's fragment in `version`, with a new secret: on the executors, or
    in this process with Arrow (`arrow`: the view syncs on the Arrow executor)."""
    if arrow:
        fragment = layers.table(version, site, query.columns, query.key)
    else:
        fragment = layers.frame(spark, version, site, query.columns, query.key)
    return sketch_tables.build(fragment, query.columns, query.key_columns(), rows)


def publish(table: sketch_tables.SiteSketch, version: Version, site: int) -> Path:
    """Write `table` as the one prepared for `site` of `version`: to a temporary directory,
    renamed into place once whole. A version removed meanwhile is not created again."""
    site_dir = version.site_dir(site)
    tmp = site_dir / f"{PREPARED}{TMP_MARK}{secrets.token_hex(4)}"
    tmp.mkdir()  # no parents: fails when the version (or the view) is gone
    try:
        table.built_for = (version.number, version.sync_id)
        table.save(tmp)
        fsync_file(tmp / sketch_tables.FILE)
        faults.checkpoint(BUILT)
        os.rename(tmp, prepared_dir(version, site))  # fails if one is there already
        fsync_dir(site_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return prepared_dir(version, site)


@dataclass(eq=False)
class _Job:
    spark: SparkSession
    version: Version
    site: int
    query: SiteQuery
    rows: int
    arrow: bool = False  # built with Arrow in this process (the view syncs on Arrow), not by Spark
    state: str = QUEUED
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> tuple[str, int]:
        return self.version.sync_id, self.site

    @property
    def group(self) -> str:
        """Spark job group of the build, to cancel it by."""
        return f"sketch-prepare-{self.version.sync_id}-{self.site}"


class Preparations:
    """The service's background builds of sketch tables, one at a time (see the module)."""

    def __init__(self, wait_s: float = SKETCH_PREPARE_WAIT_S):
        self.wait_s = wait_s
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="sketch-prepare")
        self._jobs: dict[tuple[str, int], _Job] = {}
        self._lock = threading.Lock()

    def after_commit(
        self,
        spark: SparkSession,
        version: Version,
        sites: list[tuple[int, SiteQuery]],
        rotation: int,
        arrow: bool = False,
    ) -> list[int]:
        """Queue a build for each of `sites` of the just committed `version` whose next sketch
        sync would otherwise build one (with Arrow where `arrow`: the view syncs on Arrow);
        returns those sites."""
        queued = []
        for i, query in sites:
            rows = fragment_rows(version, i)
            if not needs_table(version, i, rotation):
                continue
            job = _Job(spark, version, i, query, rows, arrow)
            with self._lock:
                self._jobs[job.key] = job
            self.pool.submit(self._run, job)
            queued.append(i)
        return queued

    def take(self, version: Version, site: int, rows: int) -> tuple[sketch_tables.SiteSketch | None, float]:
        """The table prepared for `site` of `version` (None: the caller builds it) and the
        seconds spent waiting for its build."""
        with self._lock:
            job = self._jobs.get((version.sync_id, site))
            if job is not None and job.state == QUEUED:
                job.state = TAKEN  # not started: the caller builds it sooner itself
        waited = 0.0
        if job is not None and job.state == RUNNING:
            t0 = time.monotonic()
            if not job.done.wait(self.wait_s):
                log.warning(
                    "the sketch table of %s site %d is not built after %.0f s: cancelled", *job.key, self.wait_s
                )
                job.spark.sparkContext.cancelJobGroup(job.group)
            waited = round(time.monotonic() - t0, 3)
        return load_prepared(version, site, rows), waited

    def shutdown(self) -> None:
        """Drop the queued builds and cancel a running one (the process exits when it ends)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = [job for job in self._jobs.values() if job.state == RUNNING]
        for job in running:
            try:
                job.spark.sparkContext.cancelJobGroup(job.group)
            except Exception as exc:  # a session already stopped
                log.warning("could not cancel the sketch table build of %s site %d: %s", *job.key, exc)

    def _run(self, job: _Job) -> None:
        with self._lock:
            if job.state != QUEUED:
                self._jobs.pop(job.key, None)
                job.done.set()
                return
            job.state = RUNNING
        sc = job.spark.sparkContext
        try:
            sc.setJobGroup(job.group, f"sketch table of {job.version.path} site {job.site}", interruptOnCancel=True)
            sc.setLocalProperty("spark.scheduler.pool", POOL)
            built = build(job.spark, job.version, job.site, job.query, job.rows, job.arrow)
            publish(built, job.version, job.site)
        except Exception as exc:  # the next sync builds the table itself
            log.warning("preparing the sketch table of %s site %d failed: %s", job.version.path, job.site, exc)
        finally:
            with self._lock:
                self._jobs.pop(job.key, None)
            job.done.set()
