"""The service's Prometheus metrics (GET /metrics), kept with prometheus_client.

The counters live in the process: they only grow while it runs and start again at 0 when
the service starts again, as Prometheus expects of a counter (rate() and increase() take
a reset for what it is). The last success time of each view is seeded from the catalog at
start, so that an alert on a view's staleness does not fire, nor go quiet, because of a
restart; a view that never succeeded has the series too, at 0 (the Unix epoch), so that the
same alert fires for it. Each registry belongs to one app: two apps in one process count apart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from service import resources
from service.catalog import Catalog
from warehouse.destinations.delta_file_cache import CACHE, FileCache

STATUSES = ("succeeded", "failed")
#: What starts a sync (the sync record's trigger).
TRIGGERS = ("api", "schedule", "redefine", "retry")
#: Each operation and the field of a sync's metrics that counts it.
OPS = {"insert": "rows_inserted", "update": "rows_updated", "delete": "rows_deleted"}
#: Sync durations run from a second (a small delta) to an hour (a large view's load).
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: Queue waits run from nothing (a free slot) to the length of a long sync of the same source.
WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: The classic text format (what generate_latest writes for these metric names), named as
#: every Prometheus version knows it rather than by prometheus_client's newer version=1.0.0.
MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServiceMetrics:
    """What /metrics shows; the sync runner reports each sync's start and end."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.syncs = Counter("deltasieve_syncs", "Syncs finished, by view and status", ["view", "status"], registry=r)
        self.duration = Histogram(
            "deltasieve_sync_duration_seconds",
            "Wall time of finished syncs, from start to end, by view and status",
            ["view", "status"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.sent = Counter(
            "deltasieve_agent_sent_bytes",
            "Bytes sent to the agents by syncs (failed ones too), by view",
            ["view"],
            registry=r,
        )
        self.received = Counter(
            "deltasieve_agent_received_bytes",
            "Bytes received from the agents by syncs (failed ones too), by view",
            ["view"],
            registry=r,
        )
        self.rows = Counter(
            "deltasieve_rows", "View rows changed by succeeded syncs, by view and operation", ["view", "op"], registry=r
        )
        self.last_success = Gauge(
            "deltasieve_last_success_timestamp_seconds",
            "When the view's last succeeded sync finished (Unix time; 0 for a view that never succeeded)",
            ["view"],
            registry=r,
        )
        self.data_as_of = Gauge(
            "deltasieve_data_as_of_timestamp_seconds",
            "How fresh the view's rows are: when its last succeeded sync started, the source's state it holds "
            "(Unix time; 0 for a view that never succeeded); time() minus it is the data's age",
            ["view"],
            registry=r,
        )
        self.source_up = Gauge(
            "deltasieve_source_up",
            "1 when the source's agent answered the last contact (a sync or the periodic check), 0 when it was "
            "unreachable or refused (a wrong token); absent before the first contact",
            ["source"],
            registry=r,
        )
        self.running = Gauge("deltasieve_syncs_running", "Syncs running now", registry=r)
        self.queued = Gauge(
            "deltasieve_syncs_queued", "Syncs waiting for a slot of the pool or of a source they read", registry=r
        )
        self.queue_wait = Histogram(
            "deltasieve_sync_queue_wait_seconds",
            "Seconds a sync waited in the queue before it ran (the sync record's queued_s), by what started it",
            ["trigger"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.interval = Gauge(
            "deltasieve_schedule_interval_seconds",
            "The view's schedule: seconds between the end of a sync and the next (views with a schedule only)",
            ["view"],
            registry=r,
        )
        for trigger in TRIGGERS:  # shown at 0 before the first sync starts
            self.queue_wait.labels(trigger)
        self.lag = Gauge(
            "deltasieve_destination_lag_syncs",
            "Succeeded syncs that changed the view and are not applied to this destination yet",
            ["view", "destination"],
            registry=r,
        )
        self.publish = Histogram(
            "deltasieve_publish_seconds",
            "Seconds each apply of one sync's changes to a destination took (reading the stored delta, "
            "the destination's commit and its maintenance), or each rebuild, by view and destination",
            ["view", "destination"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.lineage = Counter(
            "deltasieve_lineage_events",
            "OpenLineage events of syncs, by event type and outcome: sent, failed (it could not be built, or the "
            "transport refused it: the endpoint is down, the file cannot be written) or dropped (too many waited)",
            ["event_type", "outcome"],
            registry=r,
        )
        self.delta_cache = Gauge(
            "deltasieve_delta_cache_bytes",
            "Bytes of rows of Delta files held in memory for their next rewrite (SERVICE_DELTA_CACHE_MIB)",
            registry=r,
        )
        self.delta_cache.set_function(lambda: CACHE.held_bytes)
        r.register(_CacheFiles(CACHE))
        r.register(_Resources())
        self._published: dict[str, set[str]] = {}
        self._scheduled: set[str] = set()
        self._lock = threading.Lock()

    def seed(self, catalog: Catalog) -> None:
        """Every view's series, its last success time from the catalog (at start)."""
        for view in catalog.views():
            self.known(view.name)
            last = catalog.last_succeeded(view.name)
            if last is not None and last.finished_at:
                self.last_success.labels(view.name).set(_unix(last.finished_at))
            if last is not None and last.started_at:
                self.data_as_of.labels(view.name).set(_unix(last.started_at))

    def known(self, view: str) -> None:
        """Show the view's counters at 0 before its first sync ends, so that the first
        increase is seen as one (a series that appears at 1 counts no increase)."""
        for status in STATUSES:
            self.syncs.labels(view, status)
            self.duration.labels(view, status)
        for op in OPS:
            self.rows.labels(view, op)
        self.sent.labels(view)
        self.received.labels(view)
        self.last_success.labels(view)  # 0 until it succeeds: a staleness alert fires for it
        self.data_as_of.labels(view)

    def catalogued(self, views: Iterable[str]) -> None:
        """Show the series of every view of the catalog (`views`: their names), those made since the start too."""
        for view in views:
            self.known(view)

    def source(self, source: str, up: bool) -> None:
        """The source's agent answered (`up`) or not, at the last contact."""
        self.source_up.labels(source).set(1 if up else 0)

    def forget_source(self, source: str) -> None:
        with contextlib.suppress(KeyError):
            self.source_up.remove(source)

    def started(self, view: str, trigger: str, queued_s: float) -> None:
        """A sync left the queue and runs."""
        self.known(view)
        self.running.inc()
        self.queue_wait.labels(trigger).observe(queued_s)

    def cancelled(self, view: str) -> None:
        """A queued sync was cancelled: a failed sync that never ran."""
        self.known(view)
        self.syncs.labels(view, "failed").inc()

    def finished(self, view: str, status: str, metrics: dict, seconds: float) -> None:
        """A sync ended: `metrics` is its record's (failed syncs: what it measured so far)."""
        self.running.dec()
        self.syncs.labels(view, status).inc()
        self.duration.labels(view, status).observe(seconds)
        self.sent.labels(view).inc(metrics.get("bytes_to_agent") or 0)
        self.received.labels(view).inc(metrics.get("bytes_from_agent") or 0)
        if status == "succeeded":
            for op, field in OPS.items():
                self.rows.labels(view, op).inc(metrics.get(field) or 0)
            self.last_success.labels(view).set_to_current_time()
            self.data_as_of.labels(view).set(time.time() - seconds)  # when the sync started

    def forget(self, view: str) -> None:
        """Drop a deleted view's series (its staleness would otherwise alert for ever)."""
        for metric, labels in (
            (self.syncs, [(view, s) for s in STATUSES]),
            (self.duration, [(view, s) for s in STATUSES]),
            (self.rows, [(view, op) for op in OPS]),
            (self.sent, [(view,)]),
            (self.received, [(view,)]),
            (self.last_success, [(view,)]),
            (self.data_as_of, [(view,)]),
            (self.interval, [(view,)]),
        ):
            for values in labels:
                try:
                    metric.remove(*values)
                except KeyError:
                    pass
        with self._lock:
            for destination in self._published.pop(view, set()):
                for metric in (self.lag, self.publish):
                    with contextlib.suppress(KeyError):
                        metric.remove(view, destination)

    def publication_lag(self, view: str, destination: str, lag: int) -> None:
        """How many changing syncs a destination of the view has not applied yet."""
        with self._lock:
            self._published.setdefault(view, set()).add(destination)
        self.lag.labels(view, destination).set(lag)

    def published(self, view: str, destination: str, seconds: float) -> None:
        """One sync's changes were applied to a destination of the view, or it was rebuilt, in `seconds`."""
        with self._lock:
            self._published.setdefault(view, set()).add(destination)
        self.publish.labels(view, destination).observe(seconds)

    def lineage_event(self, event_type: str, outcome: str) -> None:
        """An OpenLineage event was sent, failed or was dropped (service/lineage_sender.py)."""
        self.lineage.labels(event_type, outcome).inc()

    def schedules(self, scheduled: Mapping[str, int]) -> None:
        """Each scheduled view's interval as the catalog has it now (`scheduled`: every_s by view)."""
        with self._lock:
            for view in self._scheduled - scheduled.keys():  # views whose schedule went
                with contextlib.suppress(KeyError):  # gone with its view already (forget)
                    self.interval.remove(view)
            for view, every_s in scheduled.items():
                self.interval.labels(view).set(every_s)
            self._scheduled = set(scheduled)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _CacheFiles:
    """deltasieve_delta_cache_files_total: the Delta files a rewrite took from memory or read
    from disk, counted by the process's cache (a collector: the cache keeps the counts)."""

    def __init__(self, cache: FileCache):
        self.cache = cache

    def collect(self):
        family = CounterMetricFamily(
            "deltasieve_delta_cache_files",
            "Delta files rewritten, by where their rows came from: kept in memory, or read from disk "
            "(more reads than kept while syncs rewrite the same files: the cache is too small)",
            labels=["source"],
        )
        family.add_metric(["kept"], self.cache.hits)
        family.add_metric(["read"], self.cache.misses)
        yield family


class _Resources:
    """What the process holds now (resources.py): threads, open files, TCP connections and
    memory, so that a service of many sources shows they stay bounded; absent off Linux."""

    def collect(self):
        now = resources.usage()
        for name, text, value in (
            ("deltasieve_process_threads", "Threads of the service process", now.threads),
            ("deltasieve_process_open_files", "Open file descriptors of the service process", now.open_files),
            ("deltasieve_process_resident_memory_bytes", "Resident memory of the service process", now.rss_bytes),
            (
                "deltasieve_process_tree_resident_memory_bytes",
                "Resident memory of the service process and its descendants (its Spark JVM and that JVM's Python "
                "workers; pages they share count in each)",
                now.tree_rss_bytes,
            ),
        ):
            if value is not None:
                yield GaugeMetricFamily(name, text, value=value)
        if now.connections_in is not None:
            family = GaugeMetricFamily(
                "deltasieve_process_tcp_connections",
                "Established TCP connections of the service process: accepted (API clients) and opened (agents, "
                "its Spark JVM, destinations)",
                labels=["direction"],
            )
            family.add_metric(["accepted"], now.connections_in)
            family.add_metric(["opened"], now.connections_out)
            yield family


def _unix(timestamp: str) -> float:
    """Unix time of a catalog timestamp (ISO 8601, UTC).

    >>> _unix("1970-01-01T00:01:00.500+00:00")
    60.5
    """
    return dt.datetime.fromisoformat(timestamp).timestamp()
