"""A view as the API shows it: its definition, settings, schedule, freshness and destinations."""

from __future__ import annotations

from pathlib import Path

from service import publishing
from service.catalog import Catalog
from service.models import DestinationOut, KeyPartOut, SiteOut, ViewOut
from service.records import ViewRecord
from service.redefinitions import pending_redefinition
from service.scheduler import Scheduler, schedule_fields
from warehouse.store.versions import ViewStore
from warehouse.viewdef import ViewDef


def view_out(
    row: ViewRecord, catalog: Catalog | None = None, scheduler: Scheduler | None = None, data_dir: Path | None = None
) -> ViewOut:
    """The view as the API shows it; with the catalog, its next scheduled run (when `scheduler`
    runs) and, with the data directory too, its destinations and how far they have caught up."""
    d = ViewDef.of_view(row.name, row.definition)
    options = row.options
    return ViewOut(
        name=row.name,
        sql=row.sql,
        table=d.table,
        exclude_columns=list(d.exclude_columns),
        policies=d.policies or {},
        columns=[c.name for c in d.columns],
        column_types={c.name: str(c.type) for c in d.columns},
        key=d.key,
        key_derivation=[KeyPartOut(**part) for part in d.key_derivation or []],
        sites=[
            SiteOut(source=s.source, sql=s.sql, columns=[c.to_json() for c in s.columns], key=s.key) for s in d.sites
        ],
        strategy=options.strategy,
        **options.stamps.to_options(),
        match=options.match.model_dump() if options.match is not None else None,
        source_column_types=options.column_types,
        sample_size=options.sample_size,
        on_schema_change=options.on_schema_change,
        **schedule_fields(row, catalog, scheduler is not None),
        redefinition_pending=_redefinition_pending(row, catalog, data_dir),
        data_as_of=_data_as_of(row.name, catalog),
        destinations=[DestinationOut(**d) for d in publishing.states(catalog, data_dir, row)]
        if catalog is not None and data_dir is not None
        else [],
        created_at=row.created_at,
    )


def _redefinition_pending(view: ViewRecord, catalog: Catalog | None, data_dir: Path | None) -> bool:
    """Whether the view's stored rows wait for a sync to apply its definition (known with the
    catalog and the data directory, which holds what they follow)."""
    if catalog is None or data_dir is None:
        return False
    return pending_redefinition(catalog, ViewStore(data_dir, view.name), view) is not None


def _data_as_of(view: str, catalog: Catalog | None) -> str | None:
    """When the view's last succeeded sync started (the age of its rows), if one did."""
    last = catalog.last_succeeded(view) if catalog is not None else None
    return last.started_at if last is not None else None
