"""Views: definitions, current rows, statistics."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.responses import Response, StreamingResponse

from deltasieve_protocol.schema import SourceSchema
from service.catalog import Catalog
from service.deltaformat import NDJSON, PARQUET, rows_parquet
from service.deps import (
    ApiKey,
    CatalogDep,
    FormatQuery,
    GrantDep,
    MetricsDep,
    PublisherDep,
    SchedulerDep,
    SettingsDep,
)
from service.errors import Conflict, DependencyFailed, NotFound, Unprocessable
from service.jsonvalues import BATCH_ROWS, ndjson_lines
from service.models import (
    DestinationIn,
    MatchIn,
    ScheduleIn,
    SnapshotDiffIn,
    ViewIn,
    ViewOut,
    ViewRedefine,
    ViewSettings,
    ViewSource,
    error_responses,
)
from service.publishing import Publisher, place
from service.records import ViewRecord
from service.redefinitions import COLUMNS_HEADER, COLUMNS_HEADER_DOC, columns_header, rows_definition
from service.scheduler import Scheduler
from service.secrets import agent_token, stored_destinations
from service.settings import ServiceSettings
from service.view_answers import view_out
from warehouse.destinations.modes import Publishing, check_names
from warehouse.errors import SchemaUnavailable
from warehouse.multisets.matching import check_match
from warehouse.pipeline.source_schemas import check_column_samples, fetch_schemas
from warehouse.reading import rows as view_rows
from warehouse.reading.statistics import view_statistics
from warehouse.sample import view_sample
from warehouse.store.versions import Version, ViewStore
from warehouse.strategies.stamps import StampSettings, apply_delete_flags, check_settings
from warehouse.view_options import (
    DEFAULT_SCHEMA_POLICY,
    MatchSettings,
    Schedule,
    SnapshotDiffSettings,
    ViewOptions,
    unread_detail,
    unread_settings,
)
from warehouse.viewdef import (
    ViewDef,
    ViewDefinitionError,
    analyze_table_view,
    analyze_view,
    referenced_sources,
    table_source,
)
from warehouse.viewdef import column_types as read_types
from warehouse.viewdef.policies import NONE, Policies, bind_policed

router = APIRouter(prefix="/v1/views", tags=["views"])


def _schedule(schedule: ScheduleIn | Schedule | None) -> Schedule | None:
    """The schedule a request gives, as the view's options hold it."""
    return Schedule(every_s=schedule.every_s) if schedule is not None else None


def _diff(given: SnapshotDiffIn) -> SnapshotDiffSettings:
    """The snapshot_diff settings a request gives, stored whole (the defaults too, as GET shows them)."""
    return SnapshotDiffSettings.model_validate(given.model_dump())


def _match(given: MatchIn | None) -> MatchSettings | None:
    """The `match` a request gives, as the view's options hold it (checked against the view by check_match)."""
    return MatchSettings.model_validate(given.model_dump()) if given is not None else None


def _read_by(strategy: str, body: ViewIn | ViewRedefine) -> None:
    """422 for a setting of one family of strategies that the request gives a value of its own
    (not its default) while the view's strategy never reads it."""
    given = {
        "timestamps": body.timestamps,
        "timestamp_lag_s": body.timestamp_lag_s,
        "reconcile_every": body.reconcile_every,
        "snapshot_diff": body.snapshot_diff,
    }
    unread = unread_settings(strategy, {k: v for k, v in given.items() if v is not None})  # None: left out (PUT)
    if unread:
        raise Unprocessable(unread_detail(strategy, unread))


def _unsized(options: ViewOptions) -> dict:
    """The options that decide a view's rows: all but its sample's size, its schedule, its schema policy and its destinations."""
    kept = ("sample_size", "schedule", "on_schema_change", "destinations")
    return {k: v for k, v in options.stored().items() if k not in kept}


def _named_apart(definition: ViewDef, options: ViewOptions) -> ViewOptions:
    """`options`, refused (422) when a destination's metadata columns clash with the view's
    columns or with each other, or name a column its mode does not write."""
    columns = [c.name for c in definition.columns]
    for spec in options.destinations:
        try:
            check_names(Publishing.of(spec), columns)
        except ValueError as exc:
            raise Unprocessable(f"destination {place(spec)}: {exc}") from None
    return options


def _stored(
    row: ViewRecord,
    catalog: Catalog,
    scheduler: Scheduler | None,
    settings: ServiceSettings,
    publisher: Publisher | None,
) -> ViewOut:
    """The view as stored after a change, the scheduler woken to look at its schedule and the
    publisher at its destinations (a new one is built from the view's current rows)."""
    if scheduler is not None:
        scheduler.wake()
    if publisher is not None:
        publisher.wake(row.name)
    return view_out(row, catalog, scheduler, settings.data_dir)


def _analyze(
    view: ViewSource,
    catalog: Catalog,
    settings: ServiceSettings,
    strategy: str,
    stamps: StampSettings,
    match: MatchSettings | None = None,
    sample_size: int = 0,
    schedule: ScheduleIn | Schedule | None = None,
    column_types: dict[str, str] | None = None,
    on_schema_change: str = DEFAULT_SCHEMA_POLICY,
    schemas: dict[str, SourceSchema] | None = None,
    policies: Policies = NONE,
) -> tuple[ViewDef, ViewOptions]:
    """The checked definition with its delete flags applied, and the view's options (bound
    against `schemas` when given, else against the schemas its sources' agents give now)."""
    definition, schemas = _define(view, catalog, settings) if schemas is None else (_bound(view, schemas), schemas)
    column_types = column_types or {}
    try:
        asked = read_types.resolve(column_types, _stored_sql(view, definition), schemas)
        asked_schemas = schemas
        if asked:  # bound again, with the asked columns' types
            asked_schemas = read_types.asked_schemas(schemas, asked)
            definition = read_types.with_read_from(_bind(view, asked_schemas), asked, stamps.timestamps)
        if policies:  # bound again, to the schemas as the policies leave them (viewdef/policies.py)
            definition = bind_policed(_binder(view, asked, stamps), schemas, policies)
        stamps = check_settings(stamps, definition, asked_schemas, strategy)
        match = check_match(match, definition)
        _check_samples(asked, catalog, settings)  # the agents last, once everything else is right
    except ViewDefinitionError as exc:
        raise Unprocessable(exc.detail) from None
    options = ViewOptions.of(
        strategy, stamps, match, sample_size, _schedule(schedule), column_types, on_schema_change=on_schema_change
    )
    # delete flags are compared as their sources store them, whatever column_types ask
    return apply_delete_flags(definition, stamps, schemas), options


def _binder(view: ViewSource, asked: list[read_types.AskedType], stamps: StampSettings):
    """How the view binds to a set of schemas, its column_types applied."""

    def bind(schemas):
        if not asked:
            return _bind(view, schemas)
        return read_types.with_read_from(
            _bind(view, read_types.asked_schemas(schemas, asked)), asked, stamps.timestamps
        )

    return bind


def _define(view: ViewSource, catalog: Catalog, settings: ServiceSettings) -> tuple[ViewDef, dict[str, SourceSchema]]:
    """Check the view's SQL (a table view's: of its table) against the schemas of the sources it names (422 / 424 if it cannot be maintained)."""
    try:
        names = [table_source(view.table)] if view.table is not None else referenced_sources(_sql(view))
    except ViewDefinitionError as exc:
        raise Unprocessable(exc.detail) from None

    def agents():  # looked up one at a time, as the agents are asked: the first failure answers
        for name in names:
            try:
                source = catalog.source(name)
            except NotFound:
                raise Unprocessable(
                    f"source {name!r} is not registered; register it with POST /v1/sources first (registered: {[s.name for s in catalog.sources()]})"
                ) from None
            yield name, source.url, agent_token(source, settings.secrets())

    try:
        schemas = fetch_schemas(
            agents(),
            verify=settings.agent_verify(),
            read_timeout_s=settings.agent_read_timeout_s,
            deadline_s=settings.agent_deadline_s,
        )
    except SchemaUnavailable as exc:
        raise DependencyFailed(exc.message) from None
    return _bound(view, schemas), schemas


def _bound(view: ViewSource, schemas: dict[str, SourceSchema]) -> ViewDef:
    """The view's definition bound to `schemas` (422 if it cannot be maintained)."""
    try:
        return _bind(view, schemas)
    except ViewDefinitionError as exc:
        raise Unprocessable(exc.detail) from None


def define_table_view(
    table: str,
    schemas: dict[str, SourceSchema],
    catalog: Catalog,
    settings: ServiceSettings,
    strategy: str,
    schedule: ScheduleIn | None,
    on_schema_change: str,
    destinations: list[DestinationIn],
    exclude_columns: list[str] | None = None,
    policies: Policies = NONE,
) -> tuple[ViewDef, ViewOptions]:
    """A table view's checked definition and options, bound against `schemas` already fetched
    (a mirror binds all its views against one fetch); 422 for a table no view can keep."""
    view = ViewSource(table=table, exclude_columns=exclude_columns)
    stamps = StampSettings()
    definition, options = _analyze(
        view, catalog, settings, strategy, stamps, None, 0, schedule, None, on_schema_change, schemas, policies
    )
    return definition, _named_apart(
        definition, options.published(stored_destinations(destinations, settings.secrets()))
    )


def _bind(view: ViewSource, schemas: dict[str, SourceSchema]) -> ViewDef:
    """The view's definition bound to `schemas` (ViewDefinitionError if it cannot be maintained)."""
    if view.table is not None:
        return analyze_table_view(view.table, schemas, view.exclude_columns or (), strict=True)
    return analyze_view(_sql(view), schemas)


def _check_samples(asked: list[read_types.AskedType], catalog: Catalog, settings: ServiceSettings) -> None:
    """Read a sample of each column of column_types at its agent (422 for a value that does not read, 424)."""
    sources = [catalog.source(s) for s in {a.source for a in asked}]
    agents = {s.name: (s.url, agent_token(s, settings.secrets())) for s in sources}
    try:
        check_column_samples(
            asked,
            agents,
            verify=settings.agent_verify(),
            read_timeout_s=settings.agent_read_timeout_s,
            deadline_s=settings.agent_deadline_s,
        )
    except SchemaUnavailable as exc:
        raise DependencyFailed(exc.message) from None


def _sql(view: ViewSource) -> str:
    """The SQL of a view given as SQL (the model lets through exactly one of sql and table)."""
    assert view.sql is not None, "a view without a table has SQL (ViewSource)"
    return view.sql


def _stored_sql(view: ViewSource, definition: ViewDef) -> str:
    """The SQL the catalog keeps: as written, or the SELECT a table view stands for."""
    return view.sql if view.sql is not None else definition.sql


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ViewOut,
    operation_id="create_view",
    responses=error_responses(401, 409, 422, 424),
)
def create_view(
    body: ViewIn,
    catalog: CatalogDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    publisher: PublisherDep,
    _: ApiKey,
) -> ViewOut:
    try:
        catalog.view(body.name)
    except NotFound:
        pass
    else:
        raise Conflict(f"view {body.name!r} already exists (PUT /v1/views/{body.name} redefines it, DELETE removes it)")
    _read_by(body.strategy, body)
    stamps = StampSettings(
        body.timestamps,
        body.delete_flags,
        body.timestamp_lag_s,
        body.reconcile_every,
        diff=_diff(body.snapshot_diff),
    )
    match = _match(body.match)
    definition, options = _analyze(
        body,
        catalog,
        settings,
        body.strategy,
        stamps,
        match,
        body.sample_size,
        body.schedule,
        body.column_types,
        body.on_schema_change,
        policies=Policies.given(body.columns, body.row_filter),
    )
    options = _named_apart(definition, options.published(stored_destinations(body.destinations, settings.secrets())))
    row = catalog.add_view(body.name, _stored_sql(body, definition), definition.to_json(), options)
    return _stored(row, catalog, scheduler, settings, publisher)


@router.put(
    "/{name}",
    response_model=ViewOut,
    operation_id="redefine_view",
    responses=error_responses(401, 404, 409, 422, 424),
)
def redefine_view(
    name: str,
    body: ViewRedefine,
    catalog: CatalogDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    publisher: PublisherDep,
    _: ApiKey,
) -> ViewOut:
    """Give a view a new SQL (or table: a table view) or strategy (left out: the one it has), checked and stored at once
    (GET shows it). Its sync history, the statistics of the keys that survive and change-feed
    positions stay: the rows keep their old definition until the view's next sync applies the
    new one (trigger "redefine"), whose delta starts with a "schema" line and holds the exact
    difference (of a view without key, a multiset: lines with counts). A view that gains or
    loses its key is loaded afresh instead, its history gone (its deltas change format).
    Only sample_size or schedule changed: the rows stay and the next sync resizes the sample."""
    try:
        current = catalog.view(name)
    except NotFound:
        raise NotFound(f"view {name!r} not found; create it with POST /v1/views") from None
    busy = catalog.busy_sync(name)
    if busy is not None:  # fail fast, before asking the agents; checked again when replacing
        raise Conflict(
            f"view {name!r} cannot be redefined while its sync {busy.id} is {busy.status}; wait for the sync to finish (GET /v1/views/{name}/syncs/{busy.id}), then retry"
        )
    current_options = current.options
    strategy = body.strategy or current_options.strategy
    _read_by(strategy, body)
    kept = current_options.stamps.read_by(strategy)  # another strategy's settings go with it
    stamps = StampSettings(
        body.timestamps if body.timestamps is not None else kept.timestamps,
        body.delete_flags if body.delete_flags is not None else kept.delete_flags,
        body.timestamp_lag_s if body.timestamp_lag_s is not None else kept.lag_s,
        body.reconcile_every if body.reconcile_every is not None else kept.reconcile_every,
        diff=_diff(body.snapshot_diff) if body.snapshot_diff is not None else kept.diff,
    )
    match = _match(body.match) if body.match is not None else current_options.match
    sample_size = body.sample_size if body.sample_size is not None else current_options.sample_size
    schedule = body.schedule if "schedule" in body.model_fields_set else current_options.schedule
    policy = body.on_schema_change or current_options.on_schema_change
    column_types = body.column_types if body.column_types is not None else current_options.column_types
    held = Policies.from_json(ViewDef.of_view(current.name, current.definition).policies)
    policies = Policies.given(body.columns, body.row_filter, held)
    definition, options = _analyze(
        body, catalog, settings, strategy, stamps, match, sample_size, schedule, column_types, policy, policies=policies
    )
    if body.destinations is not None:
        options = options.published(stored_destinations(body.destinations, settings.secrets()))
    elif "destinations" in current_options.stored():
        options = options.published(current_options.destinations)
    options = _named_apart(definition, options)
    sql = _stored_sql(body, definition)
    if (sql, definition.to_json(), _unsized(options)) == (
        current.sql,
        current.definition,
        _unsized(current_options),
    ):
        return _stored(catalog.set_view_options(name, options), catalog, scheduler, settings, publisher)  # rows stay
    if bool(definition.multiset) != bool(
        ViewDef.of_view(current.name, current.definition).multiset
    ):  # another delta format
        row = catalog.replace_view(name, sql, definition.to_json(), options, ViewStore(settings.data_dir, name).drop)
    else:
        row = catalog.redefine_view(name, sql, definition.to_json(), options)
    return _stored(row, catalog, scheduler, settings, publisher)


@router.patch(
    "/{name}",
    response_model=ViewOut,
    operation_id="change_view_settings",
    responses=error_responses(401, 404, 409, 422),
)
def change_view_settings(
    name: str,
    body: ViewSettings,
    catalog: CatalogDep,
    settings: SettingsDep,
    scheduler: SchedulerDep,
    publisher: PublisherDep,
    _: ApiKey,
) -> ViewOut:
    """Change settings that leave the view's rows and history as they are: `sample_size` (the next sync resizes the sample, or builds or drops it), `schedule` (null removes it), `on_schema_change` and `destinations` (a new one is built from the view's current rows, at once)."""
    try:
        current = catalog.view(name)
    except NotFound:
        raise NotFound(f"view {name!r} not found; create it with POST /v1/views") from None
    options = current.options
    if body.sample_size is not None:
        options = options.sized(body.sample_size)
    if "schedule" in body.model_fields_set:
        options = options.scheduled(_schedule(body.schedule))
    if body.on_schema_change is not None:
        options = options.policed(body.on_schema_change)
    if body.destinations is not None:
        options = options.published(stored_destinations(body.destinations, settings.secrets()))
        options = _named_apart(ViewDef.of_view(current.name, current.definition), options)
    return _stored(catalog.set_view_options(name, options), catalog, scheduler, settings, publisher)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="delete_view",
    responses=error_responses(401, 404, 409, 422),
)
def delete_view(name: str, catalog: CatalogDep, settings: SettingsDep, metrics: MetricsDep, _: ApiKey) -> Response:
    """Remove a view, its stored rows and its sync history (and its series in /metrics)."""
    catalog.delete_view(name, ViewStore(settings.data_dir, name).drop)
    metrics.forget(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", response_model=list[ViewOut], operation_id="list_views")
def list_views(catalog: CatalogDep, settings: SettingsDep, scheduler: SchedulerDep, grant: GrantDep) -> list[ViewOut]:
    """Every view (a limited key: those it may reach)."""
    return [
        view_out(r, catalog, scheduler, settings.data_dir)
        for r in catalog.views()
        if grant is None or grant.may_see_view(r.name, {site["source"] for site in r.definition.get("sites", [])})
    ]


@router.get("/{name}", response_model=ViewOut, operation_id="get_view", responses=error_responses(404, 422))
def get_view(name: str, catalog: CatalogDep, settings: SettingsDep, scheduler: SchedulerDep) -> ViewOut:
    return view_out(catalog.view(name), catalog, scheduler, settings.data_dir)


def _current(settings: ServiceSettings, name: str) -> Version:
    version = ViewStore(settings.data_dir, name).current()
    if version is None:
        raise Conflict(f"view {name!r} has not been loaded yet: run POST /v1/views/{name}/syncs first")
    return version


@router.get(
    "/{name}/rows",
    operation_id="get_view_rows",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {NDJSON: {}, PARQUET: {}},
            "description": "one JSON object per row, or a Parquet file of them",
            "headers": {
                "X-Last-Sync": {
                    "description": "the sync these rows are the result of: follow the change feed from it (GET /v1/views/{name}/changes?after=...)",
                    "schema": {"type": "string"},
                },
                COLUMNS_HEADER: COLUMNS_HEADER_DOC,
            },
        },
        **error_responses(404, 409, 422),
    },
)
def get_rows(name: str, catalog: CatalogDep, settings: SettingsDep, fmt: FormatQuery = "ndjson") -> StreamingResponse:
    """Rows of the view as of its last successful sync, as NDJSON (or Parquet); X-Last-Sync names that sync."""
    catalog.view(name)  # 404 for a view that does not exist
    version = _current(settings, name)
    definition = rows_definition(version)
    rows = view_rows.view_batches(version, definition, BATCH_ROWS)
    headers = {"X-Last-Sync": version.sync_id, COLUMNS_HEADER: columns_header(definition)}
    if fmt == "parquet":
        return StreamingResponse(rows_parquet(rows, definition.columns), media_type=PARQUET, headers=headers)
    return StreamingResponse(ndjson_lines(rows, definition.columns), media_type=NDJSON, headers=headers)


@router.get(
    "/{name}/sample",
    operation_id="get_view_sample",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {NDJSON: {}},
            "description": "one JSON object per sampled row",
            "headers": {
                "X-Sample-Size": {"description": "rows in the sample", "schema": {"type": "integer"}},
                "X-Sample-Target": {"description": "the view's sample_size", "schema": {"type": "integer"}},
                "X-View-Rows": {"description": "rows in the view at that version", "schema": {"type": "integer"}},
                "X-View-Version": {"description": "the view version the sample is of", "schema": {"type": "integer"}},
            },
        },
        **error_responses(404, 409, 422),
    },
)
def get_sample(name: str, catalog: CatalogDep, settings: SettingsDep) -> StreamingResponse:
    """A uniform random sample of the view's rows as of its last successful sync, as NDJSON
    (a view with sample_size; each row once, in no particular order)."""
    row = catalog.view(name)
    if not row.options.sample_size:
        raise Conflict(f"view {name!r} keeps no sample: give it one with PATCH /v1/views/{name} and sample_size")
    version = _current(settings, name)
    definition = rows_definition(version)
    stored = view_sample.load(version)
    if stored is None:
        raise Conflict(f"view {name!r} has no sample yet: the next sync (POST /v1/views/{name}/syncs) builds it")
    rows, state = stored
    headers = {
        "X-Sample-Size": str(state.size),
        "X-Sample-Target": str(state.target),
        "X-View-Rows": str(state.view_rows),
        "X-View-Version": str(version.number),
    }
    batches = rows.select([c.name for c in definition.columns]).to_batches(max_chunksize=BATCH_ROWS)
    return StreamingResponse(ndjson_lines(iter(batches), definition.columns), media_type=NDJSON, headers=headers)


@router.get("/{name}/statistics", operation_id="get_view_statistics", responses=error_responses(404, 409, 422))
def get_statistics(name: str, catalog: CatalogDep, settings: SettingsDep) -> dict:
    """Update statistics and deletion statistics in summary, per site."""
    catalog.view(name)  # 404 for a view that does not exist
    version = _current(settings, name)
    definition = rows_definition(version)
    return {"view": name, **view_statistics(definition, version)}
