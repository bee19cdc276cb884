"""Sending the syncs' OpenLineage events (service/lineage.py) through the OpenLineage client's transports.

Off unless configured (SERVICE_OPENLINEAGE_TRANSPORT, or SERVICE_OPENLINEAGE_URL / _FILE). The
sync runner and the publisher tell `Lineage` what happened; it builds the event from the
catalog and puts it on a queue, which one thread sends in order through the client. Nothing
here ever fails or holds up a sync: an event that cannot be built or sent is logged and
counted in /metrics (deltasieve_lineage_events_total{outcome="failed"}), one that finds the
queue full is dropped and counted (outcome="dropped").
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from service.catalog import Catalog
from service.metrics import ServiceMetrics
from service.publishing import usable
from service.settings import ServiceSettings
from warehouse.destinations import iceberg_catalog, public
from warehouse.view_options import DestinationSpec
from warehouse.viewdef import ViewDef

if TYPE_CHECKING:
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import RunEvent

    from service import lineage
    from warehouse.destinations import Destination

log = logging.getLogger("service.lineage")

#: Events waiting to be sent at most: past that a dead endpoint costs events, never memory.
QUEUE_EVENTS = 10_000
#: Extra attempts at posting one event (the client's retry, with its backoff): an endpoint
#: that stays down must not hold the events behind it for long.
HTTP_RETRIES = 2
#: Seconds a stopping service gives the queue to drain.
STOP_GRACE_S = 5.0


def client(settings: ServiceSettings) -> OpenLineageClient | None:
    """The OpenLineage client the settings ask for; None when lineage is off."""
    kind = settings.openlineage_transport
    if kind in (None, "none"):
        return None
    from openlineage.client import OpenLineageClient

    if kind == "config":  # the client's own configuration: file, OPENLINEAGE_URL, OPENLINEAGE__* variables
        return OpenLineageClient()
    if kind == "http":
        from openlineage.client.transport.http import HttpConfig, HttpTransport

        config: dict = {
            "url": settings.openlineage_url,
            "endpoint": settings.openlineage_endpoint,
            "timeout": settings.openlineage_timeout_s,
            "retry": {"total": HTTP_RETRIES, "connect": HTTP_RETRIES, "read": HTTP_RETRIES},
        }
        if settings.openlineage_api_key is not None:
            config["auth"] = {"type": "api_key", "apiKey": settings.openlineage_api_key.get_secret_value()}
        return OpenLineageClient(transport=HttpTransport(HttpConfig.from_dict(config)))
    if kind == "file":
        from openlineage.client.transport.file import FileConfig, FileTransport

        path = Path(settings.openlineage_file or "").absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        return OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))
    from openlineage.client.transport.console import ConsoleConfig, ConsoleTransport

    return OpenLineageClient(transport=ConsoleTransport(ConsoleConfig()))


class Lineage:
    """The service's OpenLineage events: what the sync runner and the publisher report, sent in order."""

    def __init__(self, settings: ServiceSettings, catalog: Catalog, metrics: ServiceMetrics | None = None):
        self.settings = settings
        self.catalog = catalog
        self.metrics = metrics or ServiceMetrics()
        self.client = client(settings)
        self._queue: queue.Queue[RunEvent | None] = queue.Queue(QUEUE_EVENTS)
        self._thread: threading.Thread | None = None
        if self.client is not None:
            self._thread = threading.Thread(target=self._send_all, name="lineage", daemon=True)
            self._thread.start()

    @property
    def on(self) -> bool:
        return self.client is not None

    # The event builders (service/lineage.py) are imported where an event is built: the
    # OpenLineage client takes about a second to import, which a service without lineage
    # (and every test of the sync runner) need not pay.

    def started(self, view: str, sync_id: str) -> None:
        def event() -> RunEvent:
            from service import lineage

            return lineage.start(self._sync(view, sync_id), _now())

        self._emit("START", event)

    def succeeded(self, view: str, sync_id: str, metrics: dict) -> None:
        def event() -> RunEvent:
            from service import lineage

            return lineage.complete(self._sync(view, sync_id), _now(), metrics)

        self._emit("COMPLETE", event)

    def failed(self, view: str, sync_id: str, error: str, code: str | None) -> None:
        def event() -> RunEvent:
            from service import lineage

            return lineage.fail(self._sync(view, sync_id), _now(), error, code)

        self._emit("FAIL", event)

    def published(self, view: str, sync_id: str, spec: DestinationSpec, destination: Destination) -> None:
        """A destination of the view applied sync `sync_id` (or was rebuilt up to it)."""

        def event() -> RunEvent:
            from service import lineage

            place = self._place(view, spec)
            if place is None:
                raise ValueError(f"destination {spec.kind} of view {view!r} has no name")
            version = destination.version_of(sync_id)
            return lineage.published(
                self._sync(view, sync_id), _now(), place, None if version is None else str(version)
            )

        self._emit("OTHER", event)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Send what is queued (waiting at most `grace_s`), then end the thread."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=grace_s)
        except queue.Full:
            pass
        self._thread.join(grace_s)

    def _emit(self, kind: str, build) -> None:
        if self.client is None:
            return
        try:
            event = build()
        except Exception:  # a sync never fails for its lineage
            log.exception("lineage: the %s event could not be built", kind)
            self.metrics.lineage_event(kind, "failed")
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            log.warning("lineage: %d events wait to be sent; a %s event was dropped", QUEUE_EVENTS, kind)
            self.metrics.lineage_event(kind, "dropped")

    def _send_all(self) -> None:
        assert self.client is not None
        while (event := self._queue.get()) is not None:
            kind = event.eventType.value if event.eventType is not None else "OTHER"
            try:
                self.client.emit(event)
            except Exception as exc:  # the endpoint is down or refuses: logged, counted, the next one tried
                log.warning("lineage: the %s event of job %s could not be sent: %s", kind, event.job.name, exc)
                self.metrics.lineage_event(kind, "failed")
            else:
                self.metrics.lineage_event(kind, "sent")

    def _sync(self, view_name: str, sync_id: str) -> lineage.SyncLineage:
        """What the events of one sync of the view name, read from the catalog now."""
        from service import lineage

        view = self.catalog.view(view_name)
        definition = ViewDef.of_view(view_name, view.definition)
        inputs = []
        for site in definition.sites:
            url = self.catalog.source(site.source).url
            inputs += [(site.source, lineage.source_table(url, table)) for table in site.tables()]
        outputs = [p for spec in view.options.destinations if (p := self._place(view_name, spec)) is not None]
        key = set(definition.key)
        columns = [lineage.Column(c.name, str(c.type), c.name in key) for c in definition.columns]
        return lineage.SyncLineage(
            self.settings.openlineage_namespace, view_name, sync_id, view.sql, inputs, outputs, columns
        )

    def _place(self, view: str, spec: DestinationSpec) -> lineage.Place | None:
        """A destination's name; None (logged) for a PostgreSQL URL that cannot be read now."""
        from service import lineage

        shown = public(spec, self.settings.data_dir.absolute(), view)
        if spec.kind == "delta":
            return lineage.delta_table(shown["uri"])
        if spec.kind in ("postgres", "iceberg"):
            try:
                spec = usable(spec, self.settings.secrets(), f"view {view!r}'s destination")
            except Exception as exc:  # its secret is unavailable: publishing fails on it too, and says why
                log.warning("lineage: view %s's %s destination left out of its events: %s", view, spec.kind, exc)
                return None
            if spec.kind == "iceberg":
                catalog = iceberg_catalog.properties(spec.catalog, self.settings.data_dir.absolute())
                return lineage.iceberg_table(catalog, spec.table or "")
            return lineage.postgres_table(spec.url or "", spec.table or "")
        # a kind without an OpenLineage naming here: its kind, and what the API shows of where it is
        return lineage.Place(spec.kind, str(shown.get("table") or shown.get("uri") or view))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
