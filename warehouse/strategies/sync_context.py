"""What every step of one sync reads, fixed when the sync starts (`SyncContext`).

The context is frozen: a step takes it with the values earlier steps returned and gives
back a frozen record of its own (pipeline/sync.py), and each site's strategy reads it
through its `SiteContext` (base.py). Two things in it are written to as the sync goes, and
only these: `metrics`, the sync's record, and `link`, the tally of the bytes and calls that
crossed to the agents (the site runs register their clients with it, failed attempts are
kept in the metrics).
"""

from __future__ import annotations

import secrets
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from pyspark.sql import SparkSession

from warehouse import executor as engines
from warehouse.cancellation import Cancellation
from warehouse.metrics import SyncMetrics
from warehouse.options import SyncOptions
from warehouse.phases import timed_phase
from warehouse.spark import local_cores
from warehouse.store.versions import ViewStore
from warehouse.strategies.sketch.prep import Preparations

T = TypeVar("T")

#: The link's counts, as `traffic()` gives them and the metrics keep them.
TRAFFIC_KEYS = ("bytes_to_agent", "bytes_from_agent", "round_trips")


@dataclass(frozen=True)
class Endpoint:
    """Where a source's agent answers."""

    name: str
    url: str
    token: str | None = None
    verify: ssl.SSLContext | str | bool = True


class Counted(Protocol):
    """Anything that talks to an agent and counts what crossed (a site run)."""

    def traffic(self) -> dict[str, int]: ...


class Link:
    """The tally of one sync's traffic: the runs that talk to agents, side by side.

    >>> class Run:
    ...     def traffic(self):
    ...         return {"bytes_to_agent": 10, "bytes_from_agent": 90, "round_trips": 1}
    >>> link = Link()
    >>> first = Run()
    >>> link.opened(first); link.opened(Run())
    >>> link.totals()["bytes_from_agent"]
    180
    >>> link.closed(first); link.totals()["round_trips"]
    1
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: list[Counted] = []

    def opened(self, run: Counted) -> None:
        with self._lock:
            self._runs.append(run)

    def closed(self, run: Counted) -> None:
        """Stop counting `run` here (a failed attempt: its traffic is kept with the attempt)."""
        with self._lock:
            self._runs.remove(run)

    def totals(self) -> dict[str, int]:
        with self._lock:
            runs = list(self._runs)
        return {k: sum(r.traffic()[k] for r in runs) for k in TRAFFIC_KEYS}


@dataclass(frozen=True)
class SyncContext:
    """One sync's fixed inputs: where, with what options, under which stop; and its two sinks."""

    spark: SparkSession
    store: ViewStore
    view_name: str
    sync_id: str
    endpoints: Mapping[str, Endpoint]
    options: SyncOptions = field(default_factory=SyncOptions)
    progress: Callable[[dict], None] = lambda info: None
    #: Background builds of sketch tables: queued after the commit, taken by the next sync.
    sketches: Preparations | None = None
    cancellation: Cancellation = field(default_factory=Cancellation)  # honoured up to the commit
    #: The secret of the sync's hashes, drawn once.
    seed: int = field(default_factory=lambda: secrets.randbits(64))
    metrics: SyncMetrics = field(default_factory=SyncMetrics)
    link: Link = field(default_factory=Link)
    #: What runs the steps (warehouse/executor.py): chosen by the sync's run (pipeline/sync.py).
    executor: engines.ExecutorName = engines.SPARK

    def afresh(self) -> SyncContext:
        """The context of the same sync run again (a schema change taken): its metrics and link
        new, keeping the failed attempts, whose bytes count."""
        return replace(self, metrics=SyncMetrics(attempts=list(self.metrics.attempts)), link=Link())

    def with_options(self, options: SyncOptions) -> SyncContext:
        """This context reading with other options (an audit's full reads), its sinks shared."""
        return replace(self, options=options)

    @property
    def local_master(self) -> bool:
        """Whether Spark runs in this process's JVM, the driver its only executor."""
        master = self.spark.sparkContext.master
        return master is not None and local_cores(master) is not None

    def on(self, executor: engines.ExecutorName) -> SyncContext:
        """This context with its steps run by `executor`, its sinks shared."""
        return replace(self, executor=executor)

    def arrow_fits(self, rows: int) -> bool:
        """Whether a step over `rows` (stored and returned) runs on Arrow in this sync."""
        return self.executor == engines.ARROW and engines.fits(rows, self.options.small_sync_rows)

    def traffic(self) -> dict[str, int]:
        """Bytes and calls so far, failed attempts included."""
        live, failed = self.link.totals(), self.metrics.attempts
        return {k: live[k] + sum(getattr(a, k) for a in failed) for k in TRAFFIC_KEYS}

    def timed(self, step: str, run: Callable[..., T], *args: Any) -> T:
        """Run one step, reporting that it started and recording its wall time under its name."""

        def announce() -> None:
            self.progress({"phase": step, **self.traffic()})

        return timed_phase(
            step, run, args, check=self.cancellation.check, announce=announce, phases=self.metrics.phases
        )
