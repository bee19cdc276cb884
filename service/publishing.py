"""Publishing: each destination of a view is applied every sync that changed the view,
exactly once and in order, after the view's commit and never blocking it.

A background thread (Publisher) looks at a view's destinations when woken for it (a sync
of it committed, its destinations changed, a worker finished one of them), at every view's
every IDLE_S and at start, and hands each one that is behind, not waiting out a backoff
and not already caught up as far as it can be (below) to a worker (destination_workers.py: a few threads per
kind, never two on one destination), so the destinations of a view are applied at the same
time and a slow PostgreSQL warehouse never delays a Delta table. For one destination of a
view the worker asks the destination what it holds (`applied()`: read from the
destination itself, so that a crash between its commit and the catalog's note loses
nothing), then goes through the view's succeeded syncs after that one, in order: a sync
with no change moves the destination's `applied_sync` on in the catalog without a commit;
a changing sync's stored delta is applied in one commit that records its id. A destination
that holds nothing starts with the view's first sync (its load: every row inserted) when that is the only one, and is
built from the view's current version otherwise.

It is rebuilt from the view's current version, in one commit marked as a rebuild, when the
delta it needs next is no longer stored (SERVICE_KEEP_DELTAS), when the sync it holds is no
longer known, or when it cannot follow a change of the view's columns (CannotFollow).

A destination that fails (down, refusing) keeps what it had: the error is recorded, the
syncs wait, and it is tried again after a backoff (BACKOFF_S doubling up to
MAX_BACKOFF_S), the other destinations going on meanwhile. Syncs are never failed by it.

A destination is handed to a worker only when there is something to publish: a view with no
succeeded sync has none, and a destination whose last turn ended without an error after
starting from the view's newest succeeded sync has done all it can until the next one (its
view's current version may be missing, say). Without that rule a worker's end woke the
publisher, which handed the same destination over again: a thread turning for ever.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from deltasieve_protocol.types import arrow_schema
from service import feed, redefinitions
from service.catalog import Catalog, changed
from service.destination_workers import DestinationWorkers
from service.errors import Gone, NotFound
from service.jsonvalues import BATCH_ROWS
from service.metrics import ServiceMetrics
from service.records import SyncRecord, ViewRecord
from service.secrets import Secrets, is_reference, revealed_storage
from service.settings import ServiceSettings
from warehouse import faults
from warehouse.destinations import CannotFollow, Destination, delta_file_cache, open_destination, public
from warehouse.destinations.modes import MODE_COLUMNS, Publishing, Stamp, replay
from warehouse.multisets.multiset import COUNT
from warehouse.names import DELETE, INSERT, OP, UPDATE
from warehouse.reading.rows import view_batches
from warehouse.store.versions import ViewStore
from warehouse.view_options import DestinationSpec
from warehouse.viewdef import ViewDef

log = logging.getLogger("service.publishing")

#: The first wait before a failed destination is tried again, doubled at each failure.
BACKOFF_S = 1.0
#: The longest wait between two tries of a failing destination.
MAX_BACKOFF_S = 60.0
#: How often the thread looks at every destination even when not woken (a safety net).
IDLE_S = 30.0


def place(spec: DestinationSpec) -> str:
    """The name of a destination in the catalog (its kind and where it is; no password).

    >>> place(DestinationSpec(kind="delta", uri="/t/v"))
    'delta /t/v'
    >>> place(DestinationSpec(kind="iceberg", table="wh.v")), place(DestinationSpec.model_validate(
    ...     {"kind": "iceberg", "table": "wh.v", "catalog": {"uri": "postgresql://me@db/wh"}}))
    ('iceberg embedded wh.v', 'iceberg sql db/wh wh.v')
    """
    if spec.kind == "delta":
        return f"delta {spec.uri or ''}".rstrip()
    if spec.kind == "iceberg":
        catalog = spec.catalog
        where = "embedded" if catalog is None else f"{catalog.type} {(catalog.uri or '').rsplit('@', 1)[-1]}".rstrip()
        return f"iceberg {where} {spec.table}"
    url = spec.url or ""
    return f"postgres {url.rsplit('@', 1)[-1]} {spec.table}"


def usable(spec: DestinationSpec, secrets: Secrets, what: str) -> DestinationSpec:
    """`spec` with its URL or its storage's credentials as the destination connects with them:
    a reference read now, a sealed one decrypted (SecretUnavailable, naming the reference,
    when it cannot be had).

    >>> usable(DestinationSpec(kind="delta", uri="/t/v"), Secrets(None), "v").uri
    '/t/v'
    >>> from cryptography.fernet import Fernet
    >>> secrets = Secrets(Fernet.generate_key().decode())
    >>> stored = {"access_key_id": secrets.seal("AKIA1", ""), "secret_access_key": secrets.seal("s3cret", "")}
    >>> usable(DestinationSpec(kind="delta", uri="s3://b/v", storage=stored), secrets, "v").storage.secret_access_key
    's3cret'
    """
    if spec.storage is not None:
        return spec.model_copy(update={"storage": revealed_storage(spec.storage, secrets, what)})
    if spec.catalog is not None:  # an iceberg catalog's secrets, each given by reference
        secrets_of = {
            name: secrets.reveal(value, f"{what}'s catalog {name}")
            for name in ("uri", "token", "credential")
            if (value := getattr(spec.catalog, name)) is not None and is_reference(value)
        }
        return spec.model_copy(update={"catalog": spec.catalog.model_copy(update=secrets_of)})
    if spec.url is None:
        return spec
    return spec.model_copy(update={"url": secrets.reveal(spec.sealed or spec.url, what), "sealed": None})


@dataclass
class _Backoff:
    failures: int = 0
    next_try: float = 0.0


class Publisher:
    """The background thread that hands every view's destinations to workers to catch them up."""

    def __init__(
        self,
        settings: ServiceSettings,
        catalog: Catalog,
        metrics: ServiceMetrics | None = None,
        applied: Callable[[str, str, DestinationSpec, Destination], None] | None = None,
    ):
        self.settings = settings
        self.catalog = catalog
        self.metrics = metrics or ServiceMetrics()
        #: told (view, sync id, spec, destination) after a destination committed a sync or was rebuilt up to one
        self.applied = applied or (lambda view, sync_id, spec, destination: None)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._backoff: dict[tuple[str, str], _Backoff] = {}
        # per destination, the newest succeeded sync when its last turn without an error began
        self._turned: dict[tuple[str, str], str] = {}
        self._workers = DestinationWorkers(settings.publish_workers, lambda key: self.wake(key[0]))
        delta_file_cache.CACHE.resize(settings.delta_cache_mib * 2**20)
        self._thread = threading.Thread(target=self._loop, name="publisher", daemon=True)
        # what the next round looks at: every view, or these; set by wake() from any thread
        self._woken = threading.Lock()
        self._everything = True
        self._views: set[str] = set()
        # the loop's own: when it next looks at every view, and at a view waiting out a backoff
        self._full_at = 0.0
        self._due_at: dict[str, float] = {}

    def start(self) -> None:
        self._thread.start()
        self.wake()

    def wake(self, view: str | None = None) -> None:
        """Look now at one view's destinations (a sync of it committed, its destinations
        changed, a worker finished one), or at every view's (None). A round over one view
        costs a few catalog reads however many views there are."""
        with self._woken:
            if view is None:
                self._everything = True
            else:
                self._views.add(view)
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self._workers.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                for view in self._round():
                    for spec in view.options.destinations:
                        if self._stop.is_set():
                            return
                        due = self._dispatch(view.name, spec)
                        if due < IDLE_S:  # waiting out a backoff: looked at again when it ends
                            at = time.monotonic() + due
                            self._due_at[view.name] = min(self._due_at.get(view.name, math.inf), at)
            except Exception:  # the thread outlives whatever went wrong: it looks again later
                log.exception("publishing: a round over the views failed")
                self._full_at = time.monotonic() + BACKOFF_S
            now = time.monotonic()
            wait = min([self._full_at - now, *(at - now for at in self._due_at.values())])
            self._wake.wait(max(wait, 0.05))

    def _round(self) -> list[ViewRecord]:
        """The views this round looks at: every view when woken for all or every IDLE_S (a
        safety net), else those woken for and those whose backoff has ended."""
        now = time.monotonic()
        with self._woken:
            everything, woken = self._everything, self._views
            self._everything, self._views = False, set()
        if everything or now >= self._full_at:
            self._full_at = now + IDLE_S
            self._due_at.clear()
            return self.catalog.views()
        due = {name for name, at in self._due_at.items() if at <= now}
        for name in due:
            del self._due_at[name]
        views = []
        for name in sorted(woken | due):
            try:
                views.append(self.catalog.view(name))
            except NotFound:  # removed since
                pass
        return views

    def _dispatch(self, view: str, spec: DestinationSpec) -> float:
        """Hand one destination to a worker if it is behind and due; seconds until it is due.

        A destination already in a worker's hands is left to it: the worker wakes this
        thread when done, which then looks at it again (a sync may have committed meanwhile).
        """
        key = (view, place(spec))
        if self._workers.busy(key):
            return IDLE_S
        backoff = self._backoff.setdefault(key, _Backoff())
        due = backoff.next_try - time.monotonic()
        if due > 0:
            return due
        last = self.catalog.last_succeeded(view)
        if last is None:
            return IDLE_S  # nothing to publish yet: the view's first succeeded sync wakes it
        applied, error = self.catalog.publication(view, key[1])
        if error is None and (applied == last.id or self._turned.get(key) == last.id):
            return IDLE_S  # caught up as the catalog knows, or as far as a turn could go
        self._workers.submit(spec.kind, key, lambda: self._turn(view, spec, last.id))
        return IDLE_S

    def _turn(self, view: str, spec: DestinationSpec, newest: str) -> None:
        """Catch one destination up (on a worker) with the syncs through `newest` at least;
        a failure records its error and a backoff."""
        key = (view, place(spec))
        backoff = self._backoff.setdefault(key, _Backoff())
        try:
            self.catch_up(view, spec)
        except Exception as exc:  # whatever failed, the sync stays applied and this one lags
            backoff.failures += 1
            delay = min(BACKOFF_S * 2 ** (backoff.failures - 1), MAX_BACKOFF_S)
            backoff.next_try = time.monotonic() + delay
            applied, _ = self.catalog.publication(view, key[1])
            error = f"{type(exc).__name__}: {exc}"
            self.catalog.set_publication(view, key[1], applied, error[:2000])
            log.warning("view %s, destination %s: %s (tried again in %.0f s)", view, key[1], error, delay)
            self._gauge(view, spec, applied)
            return
        backoff.failures, backoff.next_try = 0, 0.0
        self._turned[key] = newest

    def catch_up(self, view_name: str, spec: DestinationSpec) -> None:
        """Apply to one destination every succeeded sync of the view after the one it holds."""
        name = place(spec)
        view = self.catalog.view(view_name)
        store = ViewStore(self.settings.data_dir, view_name)
        destination = open_destination(
            usable(spec, self.settings.secrets(), f"view {view_name!r}'s destination {name}"),
            self.settings.data_dir,
            view_name,
            self.settings.keep_versions(spec.kind),
        )
        held = destination.applied()
        try:
            syncs = self.catalog.succeeded_after(view_name, held)
            why = "a new destination of a view synced before" if held is None and len(syncs) > 1 else None
        except NotFound:  # it holds a sync the catalog forgot (or another view's of the same name)
            why = "the sync it holds is no longer known"
        if why is not None:
            started = time.monotonic()
            held = self._rebuild(destination, view, store, why, Publishing.of(spec))
            self._timed(view_name, spec, started)
            if held is not None:
                self.applied(view_name, held, spec, destination)
            syncs = self.catalog.succeeded_after(view_name, held) if held is not None else []
        for i, sync in enumerate(syncs):
            if held is not None and not changed(sync):
                held = sync.id
                self.catalog.set_publication(view_name, name, held, None)
                continue
            started = time.monotonic()
            try:
                self._apply(destination, view, store, sync, syncs[i + 1 :])
                held = sync.id
            except (Gone, CannotFollow) as exc:
                held = self._rebuild(destination, view, store, str(exc), Publishing.of(spec))
                self._timed(view_name, spec, started)  # the attempt and the rebuild (a PostgreSQL load)
                self.catalog.set_publication(view_name, name, held, None)
                if held is not None:  # else the view has no version to build from: nothing to do
                    self.applied(view_name, held, spec, destination)
                    self.catch_up(view_name, spec)  # the syncs after the version it was rebuilt from
                return
            self._timed(view_name, spec, started)
            self.catalog.set_publication(view_name, name, held, None)
            self._gauge(view_name, spec, held)
            self.applied(view_name, sync.id, spec, destination)
        self.catalog.set_publication(view_name, name, held, None)
        self._gauge(view_name, spec, held)

    def _apply(
        self, destination: Destination, view: ViewRecord, store: ViewStore, sync: SyncRecord, later: list[SyncRecord]
    ) -> None:
        """One sync's stored delta to the destination (Gone when it is no longer stored)."""
        feed.stored(store, [sync])  # Gone first: nothing else is read of a sync whose delta went
        (part,) = redefinitions.segments(store, view, [sync], later)
        batches = _delta(store, view, sync, part.view)
        faults.checkpoint("before_publish")
        definition = part.view
        destination.apply(
            sync.id,
            _version_number(store, sync, later),
            definition.columns,
            definition.key,
            batches,
            bool(definition.multiset),
            synced_at=Stamp.of(sync.id, sync.finished_at).at,
        )
        faults.checkpoint("after_publish")

    def _rebuild(
        self, destination: Destination, view: ViewRecord, store: ViewStore, reason: str, publishing: Publishing
    ) -> str | None:
        """The destination replaced by the view's current rows (a history destination: by its
        history replayed from the kept deltas, where they reach back to the view's load); the
        sync id it then holds."""
        current = store.current()
        if current is None:
            return None
        definition = redefinitions.rows_definition(current)
        rows: Iterable[pa.RecordBatch] | None = None
        if publishing.mode == "history":
            history = self._history(view, store, current.sync_id, definition, publishing)
            if history is not None:
                rows = history.to_batches(BATCH_ROWS)
                reason += "; its history rebuilt from the deltas kept since the view's load"
            else:
                reason += "; its history starts at this rebuild (the deltas since the view's load are not all kept)"
        log.info("view %s, destination %s: rebuilt (%s)", view.name, destination.describe(), reason)
        destination.rebuild(
            current.sync_id,
            current.number,
            definition.columns,
            definition.key,
            rows if rows is not None else view_batches(current, definition, BATCH_ROWS),
            bool(definition.multiset),
            reason,
            synced_at=self._synced_at(view.name, current.sync_id),
            with_metadata=rows is not None,
        )
        return current.sync_id

    def _history(
        self, view: ViewRecord, store: ViewStore, through: str, definition: ViewDef, publishing: Publishing
    ) -> pa.Table | None:
        """A history table's rows replayed from the stored deltas of the view's succeeded syncs
        from its load through sync `through` (modes.replay); None when they are not all kept,
        or a redefinition among them changed the view's columns (the history then starts at
        the rebuild)."""
        try:
            syncs = self.catalog.succeeded_after(view.name, None)
        except Gone:  # retention removed the load
            return None
        ids = [s.id for s in syncs]
        if through not in ids:
            return None
        syncs = syncs[: ids.index(through) + 1]
        parts = redefinitions.segments(store, view, syncs, [])
        same = (definition.columns, definition.key, bool(definition.multiset))
        if len(parts) != 1 or (parts[0].view.columns, parts[0].view.key, bool(parts[0].view.multiset)) != same:
            return None
        view_schema = arrow_schema(definition.columns)
        deltas = []
        for i, sync in enumerate(syncs):
            if i and not changed(sync):
                continue
            try:
                batches = list(_delta(store, view, sync, definition))
            except Gone:
                return None
            lines = pa.Table.from_batches(batches) if batches else _lines_schema(view_schema, definition).empty_table()
            deltas.append((Stamp.of(sync.id, sync.finished_at), lines))
        return replay(deltas, view_schema, definition.key, bool(definition.multiset), publishing)

    def _synced_at(self, view: str, sync_id: str) -> dt.datetime:
        """The commit time of sync `sync_id` (its end, as the catalog keeps it; now when forgotten)."""
        try:
            finished = self.catalog.sync(view, sync_id).finished_at
        except (NotFound, Gone):
            finished = None
        return Stamp.of(sync_id, finished).at

    def _timed(self, view: str, spec: DestinationSpec, started: float) -> None:
        """An apply or rebuild begun at `started` (time.monotonic()) ended now: /metrics has it."""
        self.metrics.published(view, _label(spec, self.settings.data_dir, view), time.monotonic() - started)

    def _gauge(self, view: str, spec: DestinationSpec, applied: str | None) -> None:
        label = _label(spec, self.settings.data_dir, view)
        self.metrics.publication_lag(view, label, self.catalog.changing_after(view, applied))


def _label(spec: DestinationSpec, data_dir: Path, view: str) -> str:
    """A destination as /metrics labels it: its kind and where it is (password masked).

    >>> _label(DestinationSpec(kind="postgres", url="postgresql://u:pw@wh/db", table="s.t"), Path("/d"), "v")
    'postgres postgresql://u:***@wh/db s.t'
    """
    shown = public(spec, data_dir, view)
    return " ".join(str(shown[k]) for k in ("kind", "uri", "url", "table") if k in shown)


def states(catalog: Catalog, data_dir: Path, view: ViewRecord) -> list[dict]:
    """Each destination of the view as GET /v1/views/{name} shows it, with its lag."""
    out = []
    for spec in view.options.destinations:
        applied, error = catalog.publication(view.name, place(spec))
        shown = public(spec, data_dir, view.name)
        publishing = Publishing.of(spec)
        columns = {c: publishing.name(c) for c in MODE_COLUMNS[spec.mode]}
        lag = catalog.changing_after(view.name, applied)
        out.append(
            {**shown, "mode": spec.mode, "columns": columns, "applied_sync": applied, "lag_syncs": lag, "error": error}
        )
    return out


def _version_number(store: ViewStore, sync: SyncRecord, later: list[SyncRecord]) -> int:
    """The view version sync `sync` committed: stored, or counted back from the current one."""
    version = store.version_of(sync.id)
    if version is not None:
        return version.number
    current = store.current()
    return (current.number if current is not None else 0) - len(later)


def _delta(store: ViewStore, view: ViewRecord, sync: SyncRecord, definition: ViewDef) -> Iterator[pa.RecordBatch]:
    """One sync's stored delta as base.py hands it to a destination (a multiset's as inserts
    and deletes), read with `definition` (the one it follows); Gone when it is no longer stored."""
    ((_, path),) = feed.stored(store, [sync])
    shape = feed.Shape(definition, view.options.match is not None, False)
    batches = feed.delta_batches(path, shape, BATCH_ROWS)
    return set_operations(batches, shape) if definition.multiset else batches


def _lines_schema(view: pa.Schema, definition: ViewDef) -> pa.Schema:
    """The schema of a delta as base.py hands it: OP, the view's columns, a multiset's COUNT."""
    fields = [pa.field(OP, pa.string()), *view]
    return pa.schema(fields + ([pa.field(COUNT, pa.int64())] if definition.multiset else []))


def set_operations(batches: Iterator[pa.RecordBatch], shape: feed.Shape) -> Iterator[pa.RecordBatch]:
    """A multiset view's normalized delta as inserts and deletes only (base.py): a matched
    update becomes a delete of its old row and an insert of its new one.

    >>> from deltasieve_protocol.types import Column, LogicalType
    >>> from warehouse.viewdef import ViewDef
    >>> view = ViewDef("", [Column("a", LogicalType("int"))], [], [], multiset={"count": COUNT, "nulls": {}})
    >>> shape = feed.Shape(view, True, False)
    >>> old = pa.StructArray.from_arrays([pa.array([None, 1])], ["a"], mask=pa.array([True, False]))
    >>> batch = pa.RecordBatch.from_arrays([pa.array(["insert", "update"]), pa.array([5, 2]), pa.array([3, 1]), old], schema=shape.schema())
    >>> [b.to_pylist() for b in set_operations(iter([batch]), shape)]
    [[{'__op': 'insert', 'a': 5, '__ds_count': 3}], [{'__op': 'delete', 'a': 1, '__ds_count': 1}], [{'__op': 'insert', 'a': 2, '__ds_count': 1}]]
    """
    names = shape.names
    schema = pa.schema(
        [pa.field(OP, pa.string()), *(shape.schema().field(n) for n in names), pa.field(COUNT, pa.int64())]
    )
    for batch in batches:
        updating = pc.equal(batch.column(OP), UPDATE)
        plain = batch.filter(pc.invert(updating))
        yield pa.RecordBatch.from_arrays([plain.column(f.name) for f in schema], schema=schema)
        updates = batch.filter(updating)
        if not updates.num_rows or feed.OLD not in batch.schema.names:
            continue
        olds = updates.column(feed.OLD)
        n = updates.num_rows
        ones = pa.array([1] * n, pa.int64())
        gone = [pa.array([DELETE] * n), *(olds.field(name) for name in names), ones]
        came = [pa.array([INSERT] * n), *(updates.column(name) for name in names), ones]
        yield pa.RecordBatch.from_arrays(gone, schema=schema)
        yield pa.RecordBatch.from_arrays(came, schema=schema)
