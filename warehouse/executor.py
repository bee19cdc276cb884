"""Which engine runs a sync's steps: Arrow in the service's own process, or Spark.

A sync's steps each have one implementation that works on either engine: the stored rows
read, compared and written as Arrow tables in the service's process (the driver of a local
master), or as Spark frames on the executors. Arrow costs nothing fixed (no job, no task, no
staging through the JVM) but holds what it works on in memory; Spark's jobs cost tens to
hundreds of milliseconds each whatever their size, and spread what they hold over a
cluster. So a view is synced on Arrow while its stored rows and its delta fit under the
service's `small_sync_rows`, and on Spark once it outgrows them, back again when it
shrinks: `choose` decides at the start of each sync from the stored rows, and `fits` again
at each site's build from the rows the agent returned (a delta that does not fit moves the
rest of the sync onto Spark). The sync's metrics say which ran (`executor`) and how many
Spark jobs it ran (`spark_jobs`: none on Arrow).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

ExecutorName = Literal["arrow", "spark"]

ARROW: ExecutorName = "arrow"
SPARK: ExecutorName = "spark"

#: Stored rows plus delta rows up to which a view is synced on Arrow (SERVICE_SMALL_SYNC_ROWS).
#: At 250,000 rows of a narrow table the Arrow build of a whole fragment takes a fraction of
#: a second and a few tens of MiB, where the Spark build of the same fragment took seconds,
#: most of it the jobs' fixed cost (measured for DRIVER_BUILD_ROWS, which this replaced);
#: a 1,000-row no-change sync costs tens of milliseconds on Arrow.
DEFAULT_SMALL_SYNC_ROWS = 250_000


def choose(stored_rows: int, small_sync_rows: int, *, local_master: bool, runs_on_arrow: bool) -> ExecutorName:
    """The engine of a sync whose view stores `stored_rows` rows.

    Arrow needs the driver to be the only executor (a local master), steps that all have
    an Arrow form for this view (`runs_on_arrow`), and rows under the threshold; 0 sends
    every sync to Spark.

    >>> choose(1_000, 250_000, local_master=True, runs_on_arrow=True)
    'arrow'
    >>> choose(1_000, 0, local_master=True, runs_on_arrow=True)
    'spark'
    >>> choose(300_000, 250_000, local_master=True, runs_on_arrow=True)
    'spark'
    >>> choose(1_000, 250_000, local_master=False, runs_on_arrow=True)
    'spark'
    """
    if local_master and runs_on_arrow and fits(stored_rows, small_sync_rows):
        return ARROW
    return SPARK


def ascending(names: Iterable[str]) -> list[tuple[str, str, str]]:
    """Arrow sort keys that order rows as Spark's ascending sort does (NULL first): for a
    step whose order reaches the wire, so that both engines send the same bytes.

    >>> ascending(["k", "n"])
    [('k', 'ascending', 'at_start'), ('n', 'ascending', 'at_start')]
    """
    return [(name, "ascending", "at_start") for name in names]


def fits(rows: int, small_sync_rows: int) -> bool:
    """Whether `rows` (stored and returned) are few enough for Arrow.

    >>> fits(0, 0), fits(10, 10), fits(11, 10)
    (False, True, False)
    """
    return 0 < small_sync_rows and rows <= small_sync_rows
