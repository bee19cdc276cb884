"""Syncs: start one, follow it, read its delta."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse, StreamingResponse

from warehouse import multiset
from warehouse.storage import OP, ViewStore
from warehouse.viewdef import ViewDef

from ..deps import ApiKey, CatalogDep, RunnerDep, SettingsDep
from ..errors import Conflict, NotFound
from ..jsonvalues import ndjson_lines
from ..models import SyncOut, SyncQueued, error_responses

router = APIRouter(prefix="/v1/views/{name}/syncs", tags=["syncs"])

NDJSON = "application/x-ndjson"
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
        return SyncQueued(id=record["id"], status="queued")
    await asyncio.to_thread(runner.wait, record["id"])
    return JSONResponse(SyncOut(**catalog.sync(name, record["id"])).model_dump(), status_code=200)


@router.get("", response_model=list[SyncOut], operation_id="list_syncs", responses=error_responses(404, 422))
def list_syncs(name: str, catalog: CatalogDep) -> list[SyncOut]:
    catalog.view(name)
    return [SyncOut(**s) for s in catalog.syncs(name)]


@router.get("/{sync_id}", response_model=SyncOut, operation_id="get_sync", responses=error_responses(404, 422))
def get_sync(name: str, sync_id: str, catalog: CatalogDep) -> SyncOut:
    return SyncOut(**catalog.sync(name, sync_id))


@router.get(
    "/{sync_id}/delta",
    operation_id="get_sync_delta",
    response_class=StreamingResponse,
    responses={
        200: {"content": {NDJSON: {}}, "description": "one {op, row} object per changed view row"},
        **error_responses(404, 409, 422),
    },
)
def get_delta(name: str, sync_id: str, catalog: CatalogDep, settings: SettingsDep) -> StreamingResponse:
    """The sync's delta as NDJSON: {"op": insert|update|delete, "row": {...}} per line."""
    sync = catalog.sync(name, sync_id)
    if sync["status"] != "succeeded":
        raise Conflict(f"sync {sync_id} is {sync['status']}; only a succeeded sync has a delta")
    path = ViewStore(settings.data_dir, name).delta(sync_id)
    if not path.exists():
        raise NotFound(f"the delta of sync {sync_id} is no longer stored")
    definition = ViewDef.from_json(catalog.view(name)["definition"])
    counted = {"count_column": multiset.COUNT, "old_prefix": multiset.OLD_PREFIX} if definition.multiset else {}
    return StreamingResponse(ndjson_lines(path, definition.columns, op_column=OP, **counted), media_type=NDJSON)
