"""Sources: the agents the warehouse reads from, registered, checked, changed and removed."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Response, status

from deltasieve_protocol.models import TableOut
from deltasieve_protocol.schema import SourceSchema
from service import mirroring
from service.deps import ApiKey, CatalogDep, GrantDep, HealthDep, MetricsDep, SchedulerDep, SettingsDep
from service.errors import Conflict, DependencyFailed, NotFound, Unprocessable
from service.models import error_responses
from service.records import SourceRecord
from service.routes.views import define_table_view
from service.secrets import SecretRefused, Secrets, agent_token, shown, source_token
from service.settings import ServiceSettings
from service.source_health import SourceHealth
from service.source_models import (
    MirroredOut,
    MirrorIn,
    MirrorOut,
    MirrorSkippedOut,
    SourceHealthOut,
    SourceIn,
    SourceOut,
    SourcePatch,
    SourceTablesOut,
)
from warehouse.errors import SchemaUnavailable, SecretUnavailable
from warehouse.pipeline.source_schemas import fetch_schemas
from warehouse.viewdef import ViewDefinitionError
from warehouse.viewdef.policies import NONE, Policies, table_policies

router = APIRouter(prefix="/v1/sources", tags=["sources"])

#: Longest wait for an agent that a registration or a change asks for its schema (seconds).
CHECK_TIMEOUT_S = 15.0


def _out(row: SourceRecord, health: SourceHealth) -> SourceOut:
    # The token is a secret: say whether there is one, never what it is.
    known = health.of(row.name)
    return SourceOut(
        name=row.name,
        url=row.url,
        has_token=bool(row.token),
        token_reference=shown(row.token),
        created_at=row.created_at,
        health=SourceHealthOut(**dataclasses.asdict(known)) if known is not None else None,
    )


#: What a 424 of a registration or a change suggests besides fixing the agent.
UNCHECKED_HINT = '; fix the URL or the token, or pass "check": false'


def _schema(
    name: str, url: str, token: str | None, settings: ServiceSettings, hint: str = UNCHECKED_HINT
) -> SourceSchema:
    """The agent's schema, or a 424 that says why it could not be had (unreachable, token refused)."""
    try:
        return fetch_schemas(
            [(name, url, token)],
            verify=settings.agent_verify(),
            read_timeout_s=min(settings.agent_read_timeout_s, CHECK_TIMEOUT_S),
            deadline_s=min(settings.agent_deadline_s, CHECK_TIMEOUT_S),
        )[name]
    except SchemaUnavailable as exc:
        raise DependencyFailed(f"{exc.message}{hint}") from None


def _given(name: str, token: str | None, secrets: Secrets, check: bool) -> tuple[str | None, str | None]:
    """A token a request gives: as the catalog stores it, and (with check) as the agent takes it;
    422 for a literal without SERVICE_SECRET_KEY or a reference that does not resolve."""
    if token is None:
        return None, None
    try:
        stored = secrets.seal(token, f"the token of source {name!r}")
        return stored, source_token(secrets, name, stored) if check else None
    except (SecretRefused, SecretUnavailable) as exc:
        raise Unprocessable(str(exc)) from None


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SourceOut,
    operation_id="create_source",
    responses=error_responses(401, 409, 422, 424),
)
def create_source(
    body: SourceIn, catalog: CatalogDep, settings: SettingsDep, health: HealthDep, _: ApiKey
) -> SourceOut:
    url = body.url.rstrip("/")
    stored, token = _given(body.name, body.token, settings.secrets(), body.check)
    if body.check:
        try:
            catalog.source(body.name)
        except NotFound:
            _schema(body.name, url, token, settings)
        else:
            raise Conflict(f"source {body.name!r} already exists")
    row = catalog.add_source(body.name, url, stored)
    if body.check:
        health.report(row.name, None)  # its agent just answered
    return _out(row, health)


@router.get("", response_model=list[SourceOut], operation_id="list_sources")
def list_sources(catalog: CatalogDep, health: HealthDep, grant: GrantDep) -> list[SourceOut]:
    """Every source (a limited key: those it may reach), with its health (how its agent answered the last contact)."""
    return [_out(r, health) for r in catalog.sources() if grant is None or grant.may_see_source(r.name)]


@router.get("/{name}", response_model=SourceOut, operation_id="get_source", responses=error_responses(404, 422))
def get_source(name: str, catalog: CatalogDep, health: HealthDep) -> SourceOut:
    """The source, with its health (how its agent answered the last contact)."""
    return _out(catalog.source(name), health)


@router.patch(
    "/{name}",
    response_model=SourceOut,
    operation_id="update_source",
    responses=error_responses(401, 404, 422, 424),
)
def update_source(
    name: str, body: SourcePatch, catalog: CatalogDep, settings: SettingsDep, health: HealthDep, _: ApiKey
) -> SourceOut:
    """Change a source's agent URL or token (a rotated token, a moved agent); its views keep everything."""
    current = catalog.source(name)
    url = body.url.rstrip("/") if body.url is not None else current.url
    secrets = settings.secrets()
    if "token" in body.model_fields_set:
        stored, token = _given(name, body.token, secrets, body.check)
    else:
        stored, token = current.token, agent_token(current, settings.secrets()) if body.check else None
    if body.check:
        _schema(name, url, token, settings)
    row = catalog.update_source(name, url, stored)
    if body.check:
        health.report(name, None)
    else:  # another agent or token: what the last contact said no longer holds
        health.forget(name)
    return _out(row, health)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="delete_source",
    responses=error_responses(401, 404, 409),
)
def delete_source(name: str, catalog: CatalogDep, health: HealthDep, metrics: MetricsDep, _: ApiKey) -> Response:
    """Remove a source no view reads (409 names the views that still do)."""
    catalog.delete_source(name)
    health.forget(name)
    metrics.forget_source(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{name}/tables",
    response_model=SourceTablesOut,
    operation_id="get_source_tables",
    responses=error_responses(404, 422, 424),
)
def get_source_tables(name: str, catalog: CatalogDep, settings: SettingsDep) -> SourceTablesOut:
    """The tables the source's agent exposes, with their columns, types and keys, asked of it now."""
    source = catalog.source(name)
    schema = _schema(name, source.url, agent_token(source, settings.secrets()), settings)
    tables = [TableOut.model_validate(t) for t in schema.to_json()["tables"]]
    return SourceTablesOut(source=name, dialect=schema.dialect, tables=tables)


@router.post(
    "/{name}/mirror",
    response_model=MirrorOut,
    operation_id="mirror_source",
    responses=error_responses(401, 404, 422, 424),
)
def mirror_source(
    name: str, body: MirrorIn, catalog: CatalogDep, settings: SettingsDep, scheduler: SchedulerDep, _: ApiKey
) -> MirrorOut:
    """A table view of each table of the source (`tables`, or every table its agent exposes), named
    `<source>_<table>` (`<source>_<schema>_<table>` outside the default schema) lower-cased, other
    characters as `_`, cut with a short hash past 63 characters. Run again, it creates the views of
    the tables that appeared and lists the others as existing, unchanged; a table no view can keep,
    or whose name another view holds, is skipped with the reason. The agent is asked for its schema
    once; with a schedule the scheduler syncs the new views, as many at a time as it runs syncs."""
    source = catalog.source(name)
    schemas = {name: _schema(name, source.url, agent_token(source, settings.secrets()), settings, hint="")}
    tables, aside = mirroring.set_aside(
        schemas[name], mirroring.mirrored_tables(schemas[name], body.tables), body.tables
    )

    excluded = mirroring.excluded_columns(schemas[name], tables, body.exclude_columns)
    try:
        policies = table_policies(Policies(dict(body.columns or {}), dict(body.row_filter or {})), name, tables)
    except ViewDefinitionError as exc:
        raise Unprocessable(exc.detail) from None

    def define(written: str):
        return define_table_view(
            written,
            schemas,
            catalog,
            settings,
            body.strategy,
            body.schedule,
            body.on_schema_change,
            body.destinations,
            excluded.get(written.partition(".")[2]),
            policies.get(written.partition(".")[2], NONE),
        )

    done = mirroring.mirror(name, tables, mirroring.table_views(catalog), catalog, define)
    if done.created and scheduler is not None:
        scheduler.wake()
    return MirrorOut(
        created=[MirroredOut(**vars(m)) for m in done.created],
        existing=[MirroredOut(**vars(m)) for m in done.existing],
        skipped=[MirrorSkippedOut(**vars(s)) for s in aside + done.skipped],
    )
