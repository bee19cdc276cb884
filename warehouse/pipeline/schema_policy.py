"""A sync under its view's schema policy: a schema change met at a source is taken, or told.

The agent refuses a site query whose columns are no longer of the registered types (409,
code schema_changed) or that names a table or column it no longer exposes (403, 422).
Then, in order: bind the view's SQL again against its sources' current schemas, as a
definition is bound when it is stored → compare the two definitions column by column
(viewdef/widening.py) → under `evolve`, when every difference is a lossless widening, run
the sync again from a copy of the current version cast to the wider types (store/widened.py,
no source read again) with the new definition, which is stored with the version the sync
commits (meta.json "definition" beside "definition_before") and adopted by the catalog as
the sync is recorded (`adopted_definition`); otherwise fail with SchemaChanged, naming
table, column, old and new type and the ways out. The view keeps its last version then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import pyarrow as pa

from deltasieve_protocol.schema import SourceSchema
from deltasieve_protocol.types import LogicalType
from warehouse.agent_client import ByteCounter
from warehouse.errors import AgentRejected, Remedy, SchemaChanged, TableChanged, WarehouseError
from warehouse.metrics import SyncMetrics
from warehouse.multisets import combinations
from warehouse.pipeline.failures import drifted
from warehouse.pipeline.schema_decision import REFUSED, Decision, decide
from warehouse.pipeline.source_schemas import fetch_schemas
from warehouse.pipeline.sync import SyncRun
from warehouse.store.versions import Version
from warehouse.store.widened import widened_copy
from warehouse.strategies.stamps import StampSettings, apply_delete_flags, check_settings
from warehouse.viewdef import ViewDef, ViewDefinitionError, analyze_table_view, analyze_view
from warehouse.viewdef import column_types as read_types
from warehouse.viewdef.policies import Policies, bind_policed
from warehouse.viewdef.widening import TypeChange, widens

#: Stores a table view's new definition (SQL, definition) from inside its sync, which then
#: applies it as a redefinition (service/redefinitions.py redefine_within).
Follow = Callable[[str, ViewDef], None]


class PolicedSync:
    """One sync of a view under its schema policy; `last_run` is the SyncRun that ran last (its
    metrics are the sync's, also when it failed). `follow`: how a table view takes its
    table's new columns (None: it cannot, the change is refused)."""

    def __init__(
        self,
        run: SyncRun,
        sql: str,
        policy: str,
        stamps: StampSettings,
        strategy: str,
        column_types: dict[str, str] | None = None,
        follow: Follow | None = None,
    ):
        self.last_run = run
        self.sql = sql
        self.policy = policy
        self.stamps = stamps
        self.strategy = strategy
        self.column_types = column_types or {}
        self.follow = follow

    def __call__(self) -> SyncMetrics:
        try:
            return self.last_run.run()
        except WarehouseError as exc:
            if not (drifted(exc) or isinstance(exc, TableChanged)):
                raise
            met = exc
        old = self.last_run.view
        new = self._rebound(met)
        decision = decide(old, new, self.policy, can_follow=self.follow is not None)
        if decision.action == "unrelated":  # the agent's refusal is not about the view's columns: told as it was
            raise met
        if decision.action == "refuse":
            # a view that no longer binds the same way lists what the agent listed
            records = list(decision.records) if decision.records or decision.changes else _agent_records(met)
            raise self._refused(met, records, decision.reason, decision.widening)
        if decision.action == "follow":
            assert self.follow is not None, "decide follows only where the view can"
            self.follow(new.sql, new)  # redefined within this sync, which then applies the redefinition
            return self._again(replace(self.last_run, view=new), decision)
        current = self.last_run.ctx.store.current()
        base = _widened_base(self.last_run, current, new, list(decision.changes)) if current is not None else None
        meta = {"definition": new.to_json(), "definition_before": old.to_json()}
        return self._again(replace(self.last_run, view=new, base=base, meta=meta), decision)

    def _again(self, run: SyncRun, decision: Decision) -> SyncMetrics:
        """Run `run` afresh, keeping the stopped attempt, whose bytes count, and the changes taken."""
        self.last_run = replace(run, ctx=run.ctx.afresh())
        self.last_run.metrics.schema_changes = list(decision.records)
        return self.last_run.run()

    def _rebound(self, met: WarehouseError) -> ViewDef:
        """The view's SQL bound again against its sources' current schemas (SchemaChanged when
        it no longer binds: a table or column gone, no longer exposed, or of a type it cannot be)."""
        run = self.last_run
        endpoints = [(e.name, e.url, e.token) for e in run.ctx.endpoints.values()]
        verify = next(iter(run.ctx.endpoints.values())).verify
        options = run.ctx.options
        counters: list[ByteCounter] = []
        try:
            schemas = fetch_schemas(
                endpoints,
                verify=verify,
                read_timeout_s=options.agent_read_timeout_s,
                deadline_s=options.agent_deadline_s,
                counters=counters,
            )
        finally:
            _count(run, counters)
        try:
            definition = self._bound(schemas)
            check_settings(self.stamps, definition, schemas, self.strategy)
        except ViewDefinitionError as exc:
            records = _gone(run.view, schemas) or _agent_records(met)
            raise self._refused(met, records, f"the view no longer binds to its sources: {exc.detail}") from None
        return apply_delete_flags(definition, self.stamps, schemas)

    def _bound(self, schemas: dict[str, SourceSchema]) -> ViewDef:
        """The view bound to `schemas` as it was when stored: its table's columns for a table
        view, its columns read as its column_types ask."""
        view = self.last_run.view
        return bind_policed(self._binder(schemas), schemas, Policies.from_json(view.policies))

    def _binder(self, schemas: dict[str, SourceSchema]) -> Callable[[Mapping[str, SourceSchema]], ViewDef]:
        """How the view binds to a set of schemas (its policies' or the sources' own)."""
        view = self.last_run.view
        if view.table is not None:
            table, exclude = view.table, view.exclude_columns
            return lambda s: analyze_table_view(table, s, exclude)
        asked = read_types.resolve(self.column_types, self.sql, schemas)
        if not asked:
            return lambda s: analyze_view(self.sql, s)
        return lambda s: read_types.with_read_from(
            analyze_view(self.sql, read_types.asked_schemas(s, asked)), asked, self.stamps.timestamps
        )

    def _refused(self, met: WarehouseError, records: list[dict], reason: str, widening: bool = False) -> SchemaChanged:
        """The failure of a sync that meets changes it does not take (`records`, as schema_changes;
        `widening`: every one of them is a lossless widening)."""
        view, run = self.last_run.ctx.view_name, self.last_run
        run.metrics.schema_changes = records or None
        listed = "; ".join(_told(r) for r in records)
        what = f"{listed}. The sync does not take it: {reason}" if listed else reason
        outs = ["restore the column at the source (then sync again)", "or redefine the view to match the new schema"]
        remedies = [Remedy.REDEFINE]
        if self.policy != "evolve" and records and widening:
            outs.append(
                'or, every change being a lossless widening, let the view take it (on_schema_change "evolve"), '
                "then sync again"
            )
            remedies.append(Remedy.EVOLVE)
        refused = SchemaChanged(
            f"the source schema changed under view {view!r}: {what}. The view keeps serving its last version. "
            f"Ways out: {'; '.join(outs)}"
        )
        refused.remedies = tuple(remedies)
        return refused


def _count(run: SyncRun, counters: list[ByteCounter]) -> None:
    """Count the schema reads' bytes with the refused attempt, and in the failed run's totals
    (a run that takes the widening sums its attempts again when it commits)."""
    m = run.metrics
    for c in counters:
        for target in [m, *m.attempts[-1:]]:
            target.bytes_to_agent += c.sent
            target.bytes_from_agent += c.received
            target.round_trips += c.requests


def _widened_base(run: SyncRun, current: Version, new: ViewDef, changes: list[TypeChange]) -> Version:
    """The current version copied beside the sync's staging, cast to the types of `new`."""
    sites: dict[int, dict[str, pa.DataType]] = {}
    for c in changes:
        if c.site is not None:
            sites.setdefault(c.site, {})[c.column] = c.new.arrow()
    was, now = (combinations.stored_view(v) if v.multiset and v.assembly else v for v in (run.view, new))
    stored = {n.name: n.type.arrow() for o, n in zip(was.columns, now.columns, strict=True) if o.type != n.type}
    return widened_copy(current, run.ctx.store.widening(run.ctx.sync_id), sites, stored)


def _gone(view: ViewDef, schemas: dict[str, SourceSchema]) -> list[dict]:
    """The site columns whose table or column the sources no longer expose, as schema_changes.

    >>> from deltasieve_protocol.types import Column, LogicalType
    >>> from deltasieve_protocol.schema import ColumnInfo, TableInfo
    >>> from warehouse.viewdef import SiteQuery
    >>> columns = [Column("id", LogicalType("int")), Column("amount", LogicalType("float"))]
    >>> site = SiteQuery("pg", "SELECT o.id, o.amt AS amount FROM orders AS o", columns, ["id"])
    >>> orders = TableInfo("orders", (ColumnInfo("id", LogicalType("int"), False, "integer"),), ("id",))
    >>> _gone(ViewDef("", columns, ["id"], [site]), {"pg": SourceSchema("postgres", {"orders": orders})})
    [{'table': 'pg.orders', 'column': 'amt', 'old': 'float', 'new': None, 'action': 'refused'}]
    """
    out = []
    for site in view.sites:
        tables = schemas[site.source].tables if site.source in schemas else {}
        for c in site.columns:
            table, _, column = site.origin(c.name).rpartition(".")
            info = tables.get(table)
            if table and (info is None or info.column(column) is None):
                out.append(
                    {
                        "table": f"{site.source}.{table}",
                        "column": column,
                        "old": str(c.type),
                        "new": None,
                        "action": REFUSED,
                    }
                )
    return out


def _agent_records(met: WarehouseError) -> list[dict]:
    """The changes the agent listed with its refusal (none from an agent that predates them)."""
    changes = met.changes if isinstance(met, AgentRejected) else []
    return [
        {**{k: c.get(k) for k in ("table", "column", "old", "new")}, "action": REFUSED}
        for c in changes
        if isinstance(c, dict)
    ]


def _told(record: dict) -> str:
    """A changed column of schema_changes for people.

    >>> _told({"table": "pg.orders", "column": "amt", "old": "decimal(10,4)", "new": "float"})
    'table pg.orders, column amt: was decimal(10,4), now float (not a lossless widening)'
    >>> _told({"table": "people", "column": "score", "old": "int", "new": None})
    'table people, column score: gone'
    """
    where = (
        f"table {record['table']}, column {record['column']}" if record.get("table") else f"column {record['column']}"
    )
    old, new = record.get("old"), record.get("new")
    if new is None:
        return f"{where}: gone"
    try:
        widened = widens(LogicalType.parse(str(old)), LogicalType.parse(str(new)))
    except ValueError:  # an agent's type this warehouse does not know
        return f"{where}: was {old}, now {new}"
    kind = "a lossless widening" if widened else "not a lossless widening"
    return f"{where}: was {old}, now {new} ({kind})"


def adopted_definition(version: Version | None, stored: dict) -> dict | None:
    """The definition the view takes from `version` when the sync that committed it took a
    widening (its meta holds the new one, and the one it replaced is the catalog's `stored`);
    None when there is nothing to adopt.

    The catalog adopts it before it records the sync as finished, or, if the service stopped
    in between, when it recovers: the version and its definition become the view's together.
    """
    if version is None:
        return None
    meta = version.meta()
    new, before = meta.get("definition"), meta.get("definition_before")
    if new is None or before is None or new == stored:
        return None
    if ViewDef.from_json(before).to_json() != ViewDef.from_json(stored).to_json():
        return None  # the view was redefined since: its own definition stands
    return new
