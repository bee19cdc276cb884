"""Views: definitions, current rows, statistics."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.responses import Response, StreamingResponse
from pyspark.sql import functions as F

from warehouse.agent_client import AgentClient
from warehouse.errors import WarehouseError
from warehouse.options import DEFAULT_STRATEGY
from warehouse.storage import TNO, UNO, ViewStore
from warehouse.viewdef import SourceSchema, UnknownSourceError, ViewDef, ViewDefinitionError, analyze_view, referenced_sources

from ..deps import ApiKey, CatalogDep, SettingsDep, SparkDep
from ..errors import Conflict, DependencyFailed, NotFound, Unprocessable
from ..jsonvalues import ndjson_lines
from ..models import ViewIn, ViewOut, ViewRedefine, error_responses

router = APIRouter(prefix="/v1/views", tags=["views"])

NDJSON = "application/x-ndjson"


def view_out(row: dict) -> ViewOut:
    d = ViewDef.from_json(row["definition"])
    return ViewOut(
        name=row["name"],
        sql=row["sql"],
        columns=[c.name for c in d.columns],
        column_types={c.name: str(c.type) for c in d.columns},
        key=d.key,
        sites=[{"source": s.source, "sql": s.sql, "columns": [c.to_json() for c in s.columns], "key": s.key} for s in d.sites],
        strategy=row["options"].get("strategy", DEFAULT_STRATEGY),
        created_at=row["created_at"],
    )


def _analyze(sql: str, catalog, settings) -> ViewDef:
    """Check the view's SQL against the schemas of the sources it names (422 / 424 if it cannot be maintained)."""
    try:
        names = referenced_sources(sql)
    except ViewDefinitionError as exc:
        raise Unprocessable(exc.detail) from None
    schemas = {}
    for name in names:
        try:
            source = catalog.source(name)
        except NotFound:
            raise Unprocessable(f"source {name!r} is not registered; register it with POST /v1/sources first (registered: {[s['name'] for s in catalog.sources()]})") from None
        try:
            with AgentClient(source["url"], source["token"], verify=settings.agent_verify(), read_timeout_s=settings.agent_read_timeout_s, deadline_s=settings.agent_deadline_s) as client:
                schemas[name] = SourceSchema.from_json(client.schema())
        except WarehouseError as exc:
            raise DependencyFailed(f"cannot read the schema of source {name!r}: {exc.message}") from None
    try:
        return analyze_view(sql, schemas)
    except ViewDefinitionError as exc:
        raise Unprocessable(exc.detail) from None


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ViewOut, operation_id="create_view", responses=error_responses(401, 409, 422, 424))
def create_view(body: ViewIn, catalog: CatalogDep, settings: SettingsDep, _: ApiKey) -> ViewOut:
    try:
        catalog.view(body.name)
    except NotFound:
        pass
    else:
        raise Conflict(f"view {body.name!r} already exists (PUT /v1/views/{body.name} redefines it, DELETE removes it)")
    definition = _analyze(body.sql, catalog, settings)
    row = catalog.add_view(body.name, body.sql, definition.to_json(), {"strategy": body.strategy})
    return view_out(row)


@router.put(
    "/{name}",
    response_model=ViewOut,
    operation_id="redefine_view",
    responses=error_responses(401, 404, 409, 422, 424),
)
def redefine_view(name: str, body: ViewRedefine, catalog: CatalogDep, settings: SettingsDep, _: ApiKey) -> ViewOut:
    """Give a view a new SQL or strategy. Its stored rows and sync history go; the next sync loads it afresh."""
    try:
        catalog.view(name)
    except NotFound:
        raise NotFound(f"view {name!r} not found; create it with POST /v1/views") from None
    busy = catalog.busy_sync(name)
    if busy is not None:  # fail fast, before asking the agents; checked again when replacing
        raise Conflict(f"view {name!r} cannot be redefined while its sync {busy['id']} is {busy['status']}; wait for the sync to finish (GET /v1/views/{name}/syncs/{busy['id']}), then retry")
    definition = _analyze(body.sql, catalog, settings)
    row = catalog.replace_view(name, body.sql, definition.to_json(), {"strategy": body.strategy}, ViewStore(settings.data_dir, name).drop)
    return view_out(row)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="delete_view",
    responses=error_responses(401, 404, 409, 422),
)
def delete_view(name: str, catalog: CatalogDep, settings: SettingsDep, _: ApiKey) -> Response:
    """Remove a view, its stored rows and its sync history."""
    catalog.delete_view(name, ViewStore(settings.data_dir, name).drop)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", response_model=list[ViewOut], operation_id="list_views")
def list_views(catalog: CatalogDep) -> list[ViewOut]:
    return [view_out(r) for r in catalog.views()]


@router.get("/{name}", response_model=ViewOut, operation_id="get_view", responses=error_responses(404, 422))
def get_view(name: str, catalog: CatalogDep) -> ViewOut:
    return view_out(catalog.view(name))


def _current(settings, name: str):
    version = ViewStore(settings.data_dir, name).current()
    if version is None:
        raise Conflict(f"view {name!r} has not been loaded yet: run POST /v1/views/{name}/syncs first")
    return version


@router.get("/{name}/rows", operation_id="get_view_rows", response_class=StreamingResponse, responses={200: {"content": {NDJSON: {}}, "description": "one JSON object per row"}, **error_responses(404, 409, 422)})
def get_rows(name: str, catalog: CatalogDep, settings: SettingsDep) -> StreamingResponse:
    """Rows of the view as of its last successful sync, as NDJSON."""
    definition = ViewDef.from_json(catalog.view(name)["definition"])
    version = _current(settings, name)
    return StreamingResponse(ndjson_lines(version.view_rows(), definition.columns), media_type=NDJSON)


@router.get("/{name}/statistics", operation_id="get_view_statistics", responses=error_responses(404, 409, 422))
def get_statistics(name: str, catalog: CatalogDep, settings: SettingsDep, spark: SparkDep) -> dict:
    """Update statistics (ω±) and deletion statistics (ω−) in summary, per site."""
    definition = ViewDef.from_json(catalog.view(name)["definition"])
    version = _current(settings, name)
    sites = []
    for i, site in enumerate(definition.sites):
        frag = spark.read.parquet(str(version.fragment(i)))
        p = F.col(UNO) / F.col(TNO)
        agg = frag.agg(
            F.count(F.lit(1)).alias("tuples"),
            F.avg(TNO).alias("mean_tno"),
            F.max(TNO).alias("max_tno"),
            F.sum(F.col(UNO) - 1).alias("updates_observed"),
            F.sum(F.col(TNO) - 1).alias("observations"),
            F.sum(F.when(F.col(UNO) > 1, 1).otherwise(0)).alias("tuples_ever_updated"),
        ).collect()[0]
        buckets = frag.select(F.least(F.floor(p * 10), F.lit(9)).alias("b")).groupBy("b").count().collect()
        histogram = [0] * 10
        for row in buckets:
            histogram[int(row["b"])] = row["count"]
        deletions = [r.asDict() for r in spark.read.parquet(str(version.deletions(i))).collect()]
        ratios = [d["dno"] / d["tno"] for d in deletions if d["tno"]]
        sites.append(
            {
                "source": site.source,
                "update_statistics": {
                    "tuples": agg["tuples"],
                    "mean_tno": agg["mean_tno"],
                    "max_tno": agg["max_tno"],
                    "updates_observed": agg["updates_observed"] or 0,
                    "observations": agg["observations"] or 0,
                    "tuples_ever_updated": agg["tuples_ever_updated"] or 0,
                    "update_probability_histogram": {"bucket_width": 0.1, "counts": histogram},
                },
                "deletion_statistics": {
                    "syncs": [{"sync": d["__sync"], "tno": d["tno"], "dno": d["dno"]} for d in deletions],
                    "deletion_probability": sum(ratios) / len(ratios) if ratios else 0.0,
                },
            }
        )
    return {"view": name, "version": version.number, "sites": sites}
