"""Syncs: start one, follow it, read its delta."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Annotated, Literal

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse, StreamingResponse

from service import feed, redefinitions
from service.catalog import Catalog
from service.deltaformat import NDJSON, PARQUET, Format, encode_delta
from service.deps import ApiKey, CatalogDep, FormatQuery, ReadersDep, RunnerDep, SettingsDep, WithBeforeQuery
from service.errors import Conflict
from service.jsonvalues import BATCH_ROWS
from service.models import SyncOut, SyncQueued, error_responses
from service.readers import Readers
from service.records import SyncRecord
from service.settings import ServiceSettings
from warehouse.store.versions import ViewStore

router = APIRouter(prefix="/v1/views/{name}/syncs", tags=["syncs"])

SyncMode = Literal["normal", "verify"]


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SyncQueued,
    operation_id="start_sync",
    responses={
        200: {"model": SyncOut, "description": "with ?wait=true: the finished sync"},
        **error_responses(401, 404, 409, 422),
    },
)
async def start_sync(
    name: str,
    catalog: CatalogDep,
    runner: RunnerDep,
    _: ApiKey,
    wait: bool = False,
    mode: Annotated[
        SyncMode,
        Query(
            description="verify: also read every site query in full and report rows where the view's method disagrees (an audit; costs a full read)"
        ),
    ] = "normal",
):
    """Queue a sync of the view (the first one loads it); with wait=true, answer when it ends."""
    catalog.view(name)
    record = runner.submit(name, verify=mode == "verify")
    if not wait:
        return SyncQueued(id=record.id, status="queued")
    await asyncio.to_thread(runner.wait, record.id)
    return JSONResponse(sync_out(catalog.sync(name, record.id)).model_dump(), status_code=200)


def sync_out(record: SyncRecord) -> SyncOut:
    """The sync as the API shows it: its record, every field."""
    return SyncOut(**dataclasses.asdict(record))


@router.get("", response_model=list[SyncOut], operation_id="list_syncs", responses=error_responses(404, 422))
def list_syncs(name: str, catalog: CatalogDep) -> list[SyncOut]:
    catalog.view(name)
    return [sync_out(s) for s in catalog.syncs(name)]


@router.get("/{sync_id}", response_model=SyncOut, operation_id="get_sync", responses=error_responses(404, 410, 422))
def get_sync(name: str, sync_id: str, catalog: CatalogDep) -> SyncOut:
    return sync_out(catalog.sync(name, sync_id))


@router.delete(
    "/{sync_id}",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SyncOut,
    operation_id="cancel_sync",
    responses=error_responses(401, 404, 409, 422),
)
def cancel_sync(name: str, sync_id: str, catalog: CatalogDep, runner: RunnerDep, _: ApiKey) -> SyncOut:
    """Cancel a queued or running sync: a queued one never runs, a running one stops (its
    Spark jobs cancelled, its agent calls closed) and leaves the view at its last version.
    Either ends `failed` with error_code `cancelled`; the answer is its record at the time
    (a running one may still show `running` for a moment). 409 once it has finished, or
    while it commits its result."""
    catalog.view(name)
    return sync_out(runner.cancel(name, sync_id))


@router.get(
    "/{sync_id}/delta",
    operation_id="get_sync_delta",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {NDJSON: {}, PARQUET: {}},
            "description": "one {op, row, changed?} object per changed view row (NDJSON), or the same as a Parquet file",
            "headers": {redefinitions.COLUMNS_HEADER: redefinitions.COLUMNS_HEADER_DOC},
        },
        **error_responses(404, 409, 410, 422),
    },
)
def get_delta(
    name: str,
    sync_id: str,
    catalog: CatalogDep,
    settings: SettingsDep,
    readers: ReadersDep,
    fmt: FormatQuery = "ndjson",
    with_before: WithBeforeQuery = False,
) -> StreamingResponse:
    """The sync's delta as NDJSON: {"op": insert|update|delete, "row": {...}} per line,
    updates with "changed", the columns they changed (with_before: also "before", the row
    they replaced), or as Parquet. A sync
    that applied a redefinition starts with {"sync": ID, "op": "schema", "columns": [...],
    "key": [...]} (NDJSON only: in Parquet its delta is a 409). A sync retention removed
    (SERVICE_KEEP_DELTAS) is a 410."""
    readers.hold(name)  # retention leaves the view's syncs alone until the answer is streamed
    try:
        return _delta(name, sync_id, catalog, settings, readers, fmt, with_before)
    except BaseException:
        readers.release(name)
        raise


def _delta(
    name: str,
    sync_id: str,
    catalog: Catalog,
    settings: ServiceSettings,
    readers: Readers,
    fmt: Format,
    with_before: bool,
) -> StreamingResponse:
    """The answer of get_delta, its body releasing the reader `readers` holds once streamed."""
    sync = catalog.sync(name, sync_id)
    if sync.status != "succeeded":
        raise Conflict(f"sync {sync_id} is {sync.status}; only a succeeded sync has a delta")
    store = ViewStore(settings.data_dir, name)
    view = catalog.view(name)
    parts = redefinitions.segments(store, view, [sync], catalog.succeeded_after(name, sync_id))
    refused = redefinitions.parquet_refused(name, None, parts, feed=False) if fmt == "parquet" else None
    if refused is not None:
        raise refused
    shape, batches = feed.deltas_of(catalog, store, view, parts, with_before, BATCH_ROWS)
    body, media_type = encode_delta(fmt, batches, shape, feed=False)
    headers = {redefinitions.COLUMNS_HEADER: redefinitions.columns_header(shape.view)}
    return StreamingResponse(readers.streamed(name, body), media_type=media_type, headers=headers)
