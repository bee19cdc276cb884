"""A sync under its view's schema policy: a schema change met at a source is taken, or told.

The agent refuses a site query whose columns are no longer of the registered types (409,
code schema_changed) or that names a table or column it no longer exposes (403, 422).
Then, in order: bind the view's SQL again against its sources' current schemas, as a
definition is bound when it is stored → compare the two definitions column by column
(viewdef/widening.py) → under `evolve`, when every difference is a lossless widening, run
the sync again from a copy of the current version cast to the wider types (store/widened.py,
no source read again) with the new definition, which is stored with the version the sync
commits (meta.json "definition" beside "definition_before") and adopted by the catalog once
the sync is recorded (`adopted_definition`); otherwise fail with SchemaChanged, naming
table, column, old and new type and the ways out. The view keeps its last version then.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from protocol.schema import SourceSchema
from warehouse.errors import AgentRejected, SchemaChanged, WarehouseError
from warehouse.metrics import SyncMetrics
from warehouse.multisets import combinations
from warehouse.pipeline.failures import SCHEMA_DRIFT_STATUSES
from warehouse.pipeline.source_schemas import fetch_schemas
from warehouse.pipeline.sync import SyncRun
from warehouse.store.versions import Version
from warehouse.store.widened import widened_copy
from warehouse.strategies.stamps import StampSettings, apply_delete_flags, check_settings
from warehouse.viewdef import ViewDef, ViewDefinitionError, analyze_view
from warehouse.viewdef.widening import WIDENED, TypeChange, type_changes

#: How an agent that predates error codes words a schema change (remote_agent/strategies/checks.py).
AGENT_SCHEMA_PROSE = "changed since the view was registered"
#: The action a sync record lists for a change that failed the sync.
REFUSED = "refused"


def met_schema_change(exc: WarehouseError) -> bool:
    """Whether a site's failure is its agent saying the source schema no longer fits the site query.

    >>> met_schema_change(AgentRejected("agent answered 409: ...", 409, "schema_changed"))
    True
    >>> met_schema_change(AgentRejected("no table 'orders'", 422)), met_schema_change(AgentRejected("duplicate key", 409))
    (True, False)
    """
    if not isinstance(exc, AgentRejected):
        return False
    if exc.agent_code == SchemaChanged.code or exc.status in SCHEMA_DRIFT_STATUSES:
        return True
    return exc.status == 409 and AGENT_SCHEMA_PROSE in exc.message


class PolicedSync:
    """One sync of a view under its schema policy; `run` is the SyncRun that ran last (its
    metrics are the sync's, also when it failed)."""

    def __init__(self, run: SyncRun, sql: str, policy: str, stamps: StampSettings, strategy: str):
        self.run = run
        self.sql = sql
        self.policy = policy
        self.stamps = stamps
        self.strategy = strategy

    def __call__(self) -> SyncMetrics:
        try:
            return self.run.run()
        except WarehouseError as exc:
            if not met_schema_change(exc):
                raise
            met = exc
        old = self.run.view
        new = self._rebound(met)
        changes = type_changes(old, new)
        if changes is None:
            raise self._refused(
                met, [], "the view no longer binds to the same columns, keys and site queries at the source"
            )
        if not changes:  # the agent's refusal is not about types the view was bound with: told as it was
            raise met
        if self.policy == "evolve" and all(c.widened for c in changes):
            return self._widened(new, changes)
        reason = (
            f"the view's on_schema_change is {self.policy}, which takes no change"
            if self.policy != "evolve"
            else "only lossless widenings are taken in place (on_schema_change evolve)"
        )
        raise self._refused(met, changes, reason)

    def _rebound(self, met: WarehouseError) -> ViewDef:
        """The view's SQL bound again against its sources' current schemas (SchemaChanged when
        it no longer binds: a table or column gone, no longer exposed, or of a type it cannot be)."""
        run = self.run
        endpoints = [(e.name, e.url, e.token) for e in run.endpoints.values()]
        verify = next(iter(run.endpoints.values())).verify
        options = run.options
        schemas = fetch_schemas(
            endpoints, verify=verify, read_timeout_s=options.agent_read_timeout_s, deadline_s=options.agent_deadline_s
        )
        try:
            definition = analyze_view(self.sql, schemas)
            check_settings(self.stamps, definition, schemas, self.strategy)
        except ViewDefinitionError as exc:
            gone = _gone(run.view, schemas)
            listed = "; ".join(
                f"source {g['table'].replace('.', ', table ', 1)}, column {g['column']}: gone" for g in gone
            )
            run.metrics.schema_changes = gone or None
            reason = f"the view no longer binds to its sources: {exc.detail}"
            raise self._refused(met, [], f"{listed}; {reason}" if listed else reason) from None
        return apply_delete_flags(definition, self.stamps, schemas)

    def _widened(self, new: ViewDef, changes: list[TypeChange]) -> SyncMetrics:
        """Run the sync again with definition `new`, from the current version widened to it."""
        first = self.run
        current = first.store.current()
        base = _widened_base(first, current, new, changes) if current is not None else None
        meta = {"definition": new.to_json(), "definition_before": first.view.to_json()}
        self.run = replace(first, view=new, base=base, meta=meta)
        self.run.metrics.attempts = list(first.metrics.attempts)  # the refused attempt's bytes count
        self.run.metrics.schema_changes = _records(first.view, changes, WIDENED)
        return self.run.run()

    def _refused(self, met: WarehouseError, changes: list[TypeChange], reason: str) -> SchemaChanged:
        """The failure of a sync that meets a change it does not take."""
        view, run = self.run.view_name, self.run
        run.metrics.schema_changes = (
            _records(run.view, changes, REFUSED) or run.metrics.schema_changes or _agent_records(met) or None
        )
        listed = "; ".join(_told(run.view, c) for c in changes if c.site is not None)
        what = f"{listed}. The sync does not take it: {reason}" if listed else reason
        outs = [
            "restore the column at the source (then sync again)",
            f"or redefine the view to match the new schema (PUT /v1/views/{view})",
        ]
        if self.policy != "evolve" and changes and all(c.widened for c in changes):
            outs.append(
                f'or, every change being a lossless widening, let the view take it: PATCH /v1/views/{view} with {{"on_schema_change": "evolve"}}, then sync again'
            )
        return SchemaChanged(
            f"the source schema changed under view {view!r}: {what}. The view keeps serving its last version. "
            f"Ways out: {'; '.join(outs)}"
        )


def _widened_base(run: SyncRun, current: Version, new: ViewDef, changes: list[TypeChange]) -> Version:
    """The current version copied beside the sync's staging, cast to the types of `new`."""
    sites: dict[int, dict[str, pa.DataType]] = {}
    for c in changes:
        if c.site is not None:
            sites.setdefault(c.site, {})[c.column] = c.new.arrow()
    was, now = (combinations.stored_view(v) if v.multiset and v.assembly else v for v in (run.view, new))
    stored = {n.name: n.type.arrow() for o, n in zip(was.columns, now.columns, strict=True) if o.type != n.type}
    return widened_copy(current, run.store.widening(run.sync_id), sites, stored)


def _records(view: ViewDef, changes: list[TypeChange], action: str) -> list[dict]:
    """The sync record's schema_changes: one per changed column of a site query, in source terms."""
    out = []
    for c in changes:
        if c.site is None:
            continue
        site = view.sites[c.site]
        table, _, column = site.origin(c.column).rpartition(".")
        out.append(
            {
                "table": f"{site.source}.{table}" if table else site.source,
                "column": column,
                "old": str(c.old),
                "new": str(c.new),
                "action": action,
            }
        )
    return out


def _gone(view: ViewDef, schemas: dict[str, SourceSchema]) -> list[dict]:
    """The site columns whose table or column the sources no longer expose, as schema_changes.

    >>> from protocol.types import Column, LogicalType
    >>> from protocol.schema import ColumnInfo, TableInfo
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


def _told(view: ViewDef, change: TypeChange) -> str:
    """A changed site column for people: "pg.orders.amount is double precision ...".

    >>> from protocol.types import Column, LogicalType
    >>> from warehouse.viewdef import SiteQuery
    >>> site = SiteQuery("pg", "SELECT o.id, o.amt AS amount FROM orders AS o", [], [])
    >>> _told(ViewDef("", [], [], [site]), TypeChange(0, "amount", LogicalType.parse("decimal(10,4)"), LogicalType("float")))
    'source pg, table orders, column amt: was decimal(10,4), now float (not a lossless widening)'
    """
    site = view.sites[change.site or 0]
    table, _, column = site.origin(change.column).rpartition(".")
    kind = "a lossless widening" if change.widened else "not a lossless widening"
    where = f"table {table}, column {column}" if table else f"column {column}"
    return f"source {site.source}, {where}: was {change.old}, now {change.new} ({kind})"


def adopted_definition(version: Version | None, stored: dict) -> dict | None:
    """The definition the view takes from `version` when the sync that committed it took a
    widening (its meta holds the new one, and the one it replaced is the catalog's `stored`);
    None when there is nothing to adopt.

    The catalog adopts it after recording the sync, or, if the service stopped in between,
    when it recovers: the version and its definition become the view's together.
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
