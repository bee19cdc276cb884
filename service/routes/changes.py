"""The change feed: the deltas of a view's succeeded syncs after a given one, in order."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from service import feed, redefinitions
from service.catalog import Catalog
from service.deltaformat import NDJSON, PARQUET, Format, encode_delta
from service.deps import CatalogDep, FormatQuery, ReadersDep, SettingsDep, WithBeforeQuery
from service.jsonvalues import BATCH_ROWS
from service.models import error_responses
from service.readers import Readers
from service.settings import ServiceSettings
from warehouse.store.versions import ViewStore

router = APIRouter(prefix="/v1/views/{name}", tags=["changes"])

LAST_SYNC = "X-Last-Sync"
SYNCS = "X-Syncs"
MORE = "X-More-Syncs"


@router.get(
    "/changes",
    operation_id="get_view_changes",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {NDJSON: {}, PARQUET: {}},
            "description": 'one {"sync", "op", "row", "changed"?} object per changed view row, sync by sync in the order they ran (NDJSON), or the same as a Parquet file',
            "headers": {
                LAST_SYNC: {
                    "description": "the last sync the answer includes (the `after` of the next call); with no sync included, the `after` given; absent when the view has no succeeded sync and no `after` was given",
                    "schema": {"type": "string"},
                },
                SYNCS: {"description": "how many syncs the answer includes", "schema": {"type": "integer"}},
                MORE: {
                    "description": "true when limit_syncs left out later succeeded syncs",
                    "schema": {"type": "boolean"},
                },
                redefinitions.COLUMNS_HEADER: redefinitions.COLUMNS_HEADER_DOC,
            },
        },
        **error_responses(404, 409, 410, 422),
    },
)
def get_changes(
    name: str,
    catalog: CatalogDep,
    settings: SettingsDep,
    readers: ReadersDep,
    after: Annotated[
        str | None,
        Query(
            description="a sync of the view (any status): the deltas of the succeeded syncs after it; left out: from the view's first sync kept (its load, until retention removes it); a sync retention removed is a 410"
        ),
    ] = None,
    limit_syncs: Annotated[int | None, Query(ge=1, description="at most this many syncs (the oldest first)")] = None,
    fmt: FormatQuery = "ndjson",
    with_before: WithBeforeQuery = False,
) -> StreamingResponse:
    """The deltas of every succeeded sync of the view after `after`, in the order the syncs
    ran, each line tagged with its sync: {"sync": ID, "op": ..., "row": {...}}, updates with
    "changed" (the columns they changed). Resume from
    the X-Last-Sync header, also when the answer is empty. A sync that applied a
    redefinition starts its lines with {"sync": ID, "op": "schema", "columns": [...], "key": [...]};
    in Parquet (one schema per file) a request spanning it is a 409 naming the requests to make.
    A position retention removed (SERVICE_KEEP_DELTAS) is a 410 that says how to start again;
    an id the view never had is a 404."""
    readers.hold(name)  # retention leaves the view's syncs alone until the answer is streamed
    try:
        return _changes(name, catalog, settings, readers, after, limit_syncs, fmt, with_before)
    except BaseException:
        readers.release(name)
        raise


def _changes(
    name: str,
    catalog: Catalog,
    settings: ServiceSettings,
    readers: Readers,
    after: str | None,
    limit_syncs: int | None,
    fmt: Format,
    with_before: bool,
) -> StreamingResponse:
    """The answer of get_changes, its body releasing the reader `readers` holds once streamed."""
    view = catalog.view(name)
    syncs = catalog.succeeded_after(name, after)
    more = limit_syncs is not None and len(syncs) > limit_syncs
    later: list = []
    if more:
        syncs, later = syncs[:limit_syncs], syncs[limit_syncs:]
    store = ViewStore(settings.data_dir, name)
    parts = redefinitions.segments(store, view, syncs, later)
    refused = redefinitions.parquet_refused(name, after, parts, feed=True) if fmt == "parquet" else None
    if refused is not None:
        raise refused
    shape, batches = feed.deltas_of(catalog, store, view, parts, with_before, BATCH_ROWS)
    headers = {SYNCS: str(len(syncs)), MORE: "true" if more else "false"}
    headers[redefinitions.COLUMNS_HEADER] = redefinitions.columns_header(shape.view)
    last = syncs[-1].id if syncs else after
    if last is not None:
        headers[LAST_SYNC] = last
    body, media_type = encode_delta(fmt, batches, shape, feed=True)
    return StreamingResponse(readers.streamed(name, body), media_type=media_type, headers=headers)
