"""The extraction endpoints: binary frames in, binary frames out (extract, ranges, sketch, fetch).

Each reads the control frame (refused at once if of another protocol version), validates
the site query, decodes its data frames, and only then takes one of the agent's
extraction slots and streams the strategy's answer. The change token, which reads no row,
takes no slot.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pyarrow as pa
from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from deltasieve_protocol import error_codes, frames, iblt_arrow, iblt_bytes
from deltasieve_protocol.models import ChangeTokenOut, SiteSpec
from deltasieve_protocol.resume import RESUMED_HEADER
from deltasieve_protocol.schema import FINGERPRINT_HEADER
from deltasieve_protocol.wire import HASH, UID, key_values
from remote_agent import freed_memory, resume
from remote_agent.change_tokens import read_token
from remote_agent.deps import (
    Authorized,
    ChangeTokenRequest,
    ExtractRequest,
    FetchRequest,
    Frames,
    RangesRequest,
    SketchCellsRequest,
    SketchRequest,
    SnapshotDiffRequest,
    StateDep,
)
from remote_agent.errors import AgentError, BadRequest, Busy, SourceRefused
from remote_agent.routes.responses import EXTRACTION_ERRORS, FRAMES_ANSWER, FRAMES_BODY, error_responses
from remote_agent.sitequery import ValidatedQuery
from remote_agent.state import AgentState
from remote_agent.strategies.checks import check_columns, key_columns
from remote_agent.strategies.extraction import Extraction
from remote_agent.strategies.fetch import fetch_rows
from remote_agent.strategies.group_hash import UnitIndex
from remote_agent.strategies.range_checksum import range_scan, range_set
from remote_agent.strategies.sketch import SketchStage, sketch_answer
from remote_agent.strategies.sketch_columns import cells_answer
from remote_agent.strategies.snapshot_diff import snapshot_diff_answer
from remote_agent.strategies.tuple_hash import TupleIndex

log = logging.getLogger("remote_agent")

router = APIRouter(prefix="/v1", tags=["extraction"])
#: What the three endpoints have in common in the OpenAPI document.
FRAMES_ROUTE: dict[str, Any] = {
    "response_class": StreamingResponse,
    "responses": {200: FRAMES_ANSWER, **error_responses(*EXTRACTION_ERRORS)},
    "openapi_extra": FRAMES_BODY,
}


@router.post("/change_token", operation_id="change_token", **FRAMES_ROUTE)
async def change_token(state: StateDep, _: Authorized, parsed: Frames, control: ChangeTokenRequest):
    """Whether anything the site query reads may have changed since a token: one summary frame, no row read."""
    if len(parsed) > 1:
        raise BadRequest(f"a change_token request is its control frame alone; got {[f.kind for f in parsed[1:]]!r}")
    query = state.site_query(control.site)
    summary = frames.json_frame(frames.SUMMARY, _token(state, control.site, query, control.since).model_dump())
    return StreamingResponse(
        iter([summary]), media_type=frames.MEDIA_TYPE, headers={FINGERPRINT_HEADER: query.fingerprint}
    )


def _token(state: AgentState, site: SiteSpec, query: ValidatedQuery, since: str | None) -> ChangeTokenOut:
    """The source's change token now, for `query`, and whether it is `since` (remote_agent/change_tokens.py)."""
    exposed = state.exposed(query.tables)  # whether it reads a view
    if state.settings.change_token:
        return read_token(state.adapter_for(site), state.instance, query, exposed, since)
    return ChangeTokenOut(reason="change tokens are off at this agent (--no-change-token)")


@router.post("/extract", operation_id="extract", **FRAMES_ROUTE)
async def extract(state: StateDep, _: Authorized, parsed: Frames, control: ExtractRequest):
    """Steps 2 and 3: units in, inserts / deletes / changed groups out (binary frames)."""
    query = state.site_query(control.site)
    adapter = state.adapter_for(control.site)
    if control.source_snapshot or control.changed_since is not None:
        adapter.require_row_versions()
    if control.changed_since is not None:  # the condition is the agent's own, never the wire's
        since = control.changed_since.xmin
        query = query.narrowed(lambda alias: adapter.changed_since_condition(alias, since))
    units = UnitIndex(key_columns(query), bits=control.hash_bits)
    tuples = TupleIndex(key_columns(query), bits=control.tuple_hash_bits)
    unit_kinds = (frames.UNITS, frames.UNITS_DELTA)
    for f in parsed[1:]:
        if f.kind in unit_kinds:
            batch = _data(f, frames.UNITS_DELTA)
            _require(batch, [UID, HASH])
            units.add_units(batch)
    for f in parsed[1:]:
        if f.kind in (frames.UNIT_KEYS, frames.UNIT_KEYS_DELTA):
            batch = _data(f, frames.UNIT_KEYS_DELTA)
            _require(batch, [UID])
            units.add_keys(batch)
        elif f.kind == frames.TUPLE_HASHES:
            tuples.add(_batch(f))
        elif f.kind not in unit_kinds:
            raise BadRequest(f"unexpected frame kind {f.kind!r} in an extract request")
    resumed = resume.resumed(adapter, query, control.resume_after, whole=len(parsed) == 1)  # no units, no hashes
    settings = state.settings
    work = Extraction(
        adapter,
        resumed or query,
        control.site.columns,
        units,
        seed=control.seed,
        bits=control.hash_bits,
        batch_rows=control.batch_rows,
        tuples=tuples,
        scan=settings.scan(control.expected_rows),
        source_clock=control.source_clock,
        query_plan=control.query_plan,
        source_snapshot=control.source_snapshot,
    )
    return _stream(state, query, work.run(), resumed=resumed is not None)


@router.post("/ranges", operation_id="range_checksums", **FRAMES_ROUTE)
async def ranges(state: StateDep, _: Authorized, parsed: Frames, control: RangesRequest):
    """Range checksums: per key range, ship its rows or say whether its count and hash differ."""
    query = state.site_query(control.site)
    check_columns(query, control.site.columns)
    for f in parsed[1:]:
        if f.kind != frames.RANGES:
            raise BadRequest(f"unexpected frame kind {f.kind!r} in a ranges request")
    wanted = range_set(query.key, [_batch(f) for f in parsed[1:]])
    return _stream(
        state,
        query,
        range_scan(
            state.adapter_for(control.site),
            query,
            wanted,
            seed=control.seed,
            bits=control.hash_bits,
            batch_rows=control.batch_rows,
            scan=state.settings.scan(),
        ),
    )


@router.post(
    "/sketch",
    operation_id="sketch",
    **{**FRAMES_ROUTE, "responses": {200: FRAMES_ANSWER, **error_responses(*EXTRACTION_ERRORS, 410)}},
)
async def sketch(state: StateDep, _: Authorized, parsed: Frames, control: SketchRequest):
    """Set reconciliation: the warehouse's table in; the rows only the source holds and the keys it lost out."""
    query = state.site_query(control.site)
    check_columns(query, control.site.columns)
    kinds = (frames.SKETCH, frames.SKETCH_CELLS)
    if len(parsed) != 2 or parsed[1].kind not in kinds:
        raise BadRequest(
            f"a sketch request holds one {frames.SKETCH_CELLS!r} (or {frames.SKETCH!r}) frame after the control frame; "
            f"got {[f.kind for f in parsed[1:]]!r}"
        )
    try:
        sent = parsed[1]
        if sent.kind == frames.SKETCH_CELLS:
            table = iblt_bytes.from_bytes(sent.payload, control.seed)
        else:
            table = iblt_arrow.from_arrow(_batch(sent))
    except ValueError as exc:
        raise BadRequest(f"bad sketch table: {exc}") from None
    if table.seed != control.seed:
        raise BadRequest("the sketch table's seed differs from the control message's")
    if not table.compact:
        raise BadRequest("send the sketch table compact (Iblt.to_compact: counts modulo 4, 32-bit checksums)")
    said = None  # the change token's answer, when it rides on this first stage
    if control.change_token is not None and control.session is None:
        token = _token(state, control.site, query, control.change_token.since)  # before any row is read
        said = {"change_token": token.model_dump()}
        if token.unchanged:  # nothing committed since: no read, an empty difference
            summary = {"complete": True, "unchanged": True, "rows_scanned": 0, "differences": 0, **said}
            return StreamingResponse(
                iter([frames.json_frame(frames.SUMMARY, summary)]),
                media_type=frames.MEDIA_TYPE,
                headers={FINGERPRINT_HEADER: query.fingerprint},
            )
    kept = state.reconciliations
    rec = None
    if control.session is not None:
        rec = kept.take(control.session)
        if (rec.query.sql, rec.query.key, rec.seed) != (query.sql, query.key, control.seed):
            rec.close()
            raise BadRequest(f"sketch session {control.session!r} belongs to another site query or seed")
    try:
        return _stream(
            state,
            query,
            sketch_answer(
                state.adapter_for(control.site),
                query,
                table,
                SketchStage(control.seed, control.width or table.width, control.batch_rows),
                rec=rec,
                kept=kept,
                settings=state.settings.sketch(
                    digests=control.protocol >= 4 and control.updated_rows == "digests",
                    row_check_bits=control.row_check_bits,
                    expected_rows=control.expected_rows,
                ),
                said=said,
            ),
        )
    except BaseException:
        if rec is not None and control.session is not None:  # not started: the session stays usable
            kept.restore(control.session, rec)
        raise


@router.post(
    "/sketch/cells",
    operation_id="sketch_cells",
    **{**FRAMES_ROUTE, "responses": {200: FRAMES_ANSWER, **error_responses(*EXTRACTION_ERRORS, 410)}},
)
async def sketch_cells(state: StateDep, _: Authorized, parsed: Frames, control: SketchCellsRequest):
    """The changed cells of the updated rows a peeled sketch named (protocol 4): bitmaps in, cells out."""
    query = state.site_query(control.site)
    bitmaps = []
    for f in parsed[1:]:
        if f.kind != frames.CHANGED_COLUMNS:
            raise BadRequest(f"unexpected frame kind {f.kind!r} in a sketch cells request")
        bitmaps.append(_batch(f))
    rec = state.reconciliations.take(control.session)
    try:
        if (rec.query.sql, rec.query.key, rec.seed) != (query.sql, query.key, control.seed) or rec.updated is None:
            raise BadRequest(f"sketch session {control.session!r} holds no updated rows of this site query and seed")
        answer = list(cells_answer(rec.updated, bitmaps))
    finally:
        rec.close()
    return _stream(state, query, iter(answer))


@router.post("/fetch", operation_id="fetch", **FRAMES_ROUTE)
async def fetch(state: StateDep, _: Authorized, parsed: Frames, control: FetchRequest):
    """Current rows of the site query for the keys sent (binary frames)."""
    query = state.site_query(control.site)
    keys: list = []
    for f in parsed[1:]:
        if f.kind != frames.FETCH_KEYS:
            raise BadRequest(f"unexpected frame kind {f.kind!r} in a fetch request")
        batch = _batch(f)
        _require(batch, query.key)
        keys.extend(key_values(batch, query.key))
    return _stream(
        state,
        query,
        fetch_rows(
            state.adapter_for(control.site),
            query,
            keys,
            batch_rows=control.batch_rows,
            scan=state.settings.scan(),
        ),
    )


@router.post("/snapshot_diff", operation_id="snapshot_diff", **FRAMES_ROUTE)
async def snapshot_diff(state: StateDep, _: Authorized, parsed: Frames, control: SnapshotDiffRequest):
    """Agents on dump files: the rows inserted or updated and the keys deleted between the previous dumps and the current ones."""
    query = state.site_query(control.site)
    check_columns(query, control.site.columns)
    if len(parsed) > 1:
        raise BadRequest(f"a snapshot_diff request is its control frame alone; got {[f.kind for f in parsed[1:]]!r}")
    return _stream(
        state,
        query,
        snapshot_diff_answer(
            state.adapter_for(control.site),
            query,
            control.previous,
            algorithm=control.algorithm,
            block_rows=control.block_rows,
            aging_rows=control.aging_rows,
            batch_rows=control.batch_rows,
        ),
    )


def _stream(
    state: AgentState, query: ValidatedQuery, work: Iterator[bytes], *, resumed: bool = False
) -> StreamingResponse:
    """The answer, streamed while holding one of the agent's extraction slots (429 if none is free),
    with the fingerprint of the columns of the tables `query` reads (FINGERPRINT_HEADER), and
    RESUMED_HEADER when it reads after the key the request named."""
    if not state.slots.acquire(blocking=False):
        raise Busy(f"this agent already runs {state.settings.max_concurrent_extractions} extraction(s); retry later")

    def body() -> Generator[bytes, None, None]:
        try:
            yield from work
        except AgentError as exc:
            if isinstance(exc, SourceRefused):  # the database may not have said which table
                exc.located(query.tables)
            log.warning("extraction failed: %s", exc.message)
            yield frames.json_frame(
                frames.ERROR, {"detail": exc.message, "status": exc.status, "transient": exc.transient, **exc.fields()}
            )
        except Exception as exc:  # the status line is gone: report in-band
            log.exception("extraction failed")
            yield frames.json_frame(
                frames.ERROR,
                {
                    "detail": f"agent error: {type(exc).__name__}: {exc}",
                    "status": 500,
                    "transient": False,
                    "code": error_codes.INTERNAL,
                },
            )
        finally:
            state.slots.release()
            freed_memory.release()  # so that the agent does not stay at this answer's size until the next

    headers = {FINGERPRINT_HEADER: query.fingerprint, **({RESUMED_HEADER: "1"} if resumed else {})}
    return StreamingResponse(_closed_when_gone(body()), media_type=frames.MEDIA_TYPE, headers=headers)


async def _closed_when_gone(chunks: Generator[bytes, None, None]) -> AsyncIterator[bytes]:
    """`chunks` in the server's thread pool, closed as soon as the answer ends, the client
    gone included: its `finally` (the slot's release) runs then, not whenever the garbage
    collector finds the abandoned generator."""
    try:
        async for chunk in iterate_in_threadpool(chunks):
            yield chunk
    finally:
        try:
            chunks.close()
        except ValueError:  # still running a step in a worker thread: it closes when collected
            pass


def _batch(frame: frames.Frame) -> pa.RecordBatch:
    try:
        return frame.batch()
    except Exception as exc:
        raise BadRequest(f"frame {frame.kind!r} is not a valid Arrow stream: {exc}") from None


def _data(frame: frames.Frame, delta_kind: bytes) -> pa.RecordBatch:
    """A data frame's batch, delta-decoded if it is of the delta-coded kind."""
    batch = _batch(frame)
    if frame.kind != delta_kind:
        return batch
    try:
        return frames.delta_decode(batch)
    except frames.FrameError as exc:
        raise BadRequest(str(exc)) from None


def _require(batch: pa.RecordBatch, names) -> None:
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise BadRequest(f"frame lacks columns {missing}")
