"""The agent's HTTP API: health, schema, extract (steps 2 and 3), fetch."""

from __future__ import annotations

import hmac
import logging
import threading
from typing import Annotated, Iterator

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.responses import JSONResponse, StreamingResponse

from .adapters import Adapter, TableInfo, open_adapter
from .errors import AgentError, BadRequest, Busy
from .strategies.checks import check_columns as _check_site_columns, key_columns
from .strategies.extraction import Extraction
from .strategies.fetch import fetch_rows
from .strategies.group_hash import UnitIndex
from .strategies.range_checksum import range_scan, range_set
from .strategies.tuple_hash import TupleIndex
from .protocol import frames
from .protocol.schema import schema_to_json
from .protocol.wire import HASH, UID, key_values
from .protocol.models import ErrorOut, ExtractControl, FetchControl, Health, RangesControl, SchemaOut
from .settings import AgentSettings, parse_allow
from .sitequery import ValidatedQuery, validate_site_query

log = logging.getLogger("remote_agent")

#: Seconds a client is told to wait after a 429.
RETRY_AFTER_S = 5

#: What each error status of the API means, for the OpenAPI document.
ERROR_STATUSES = {
    400: "malformed request: bad frames, control message, key or unit set",
    401: "missing or wrong bearer token",
    403: "the site query names a table or column this agent does not expose",
    409: "the source's data breaks an assumption (schema changed, NULL or duplicate key)",
    413: "the request body exceeds the agent's limit (AGENT_MAX_BODY_BYTES)",
    422: "the site query is not a SELECT-project-join the agent will run",
    429: "the agent already runs its maximum of extractions; retry after Retry-After seconds",
    503: "the legacy database cannot be reached or timed out; retry later",
}
#: Error statuses of the extraction endpoints (those that read a body and a site query).
EXTRACTION_ERRORS = (400, 401, 403, 409, 413, 422, 429, 503)
#: Request body of the extraction endpoints, for the OpenAPI document.
FRAMES_BODY = {
    "requestBody": {
        "required": True,
        "description": "binary frames: a JSON control frame first, then Arrow data frames (see remote_agent/protocol/frames.py)",
        "content": {frames.MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    }
}
FRAMES_ANSWER = {"description": "binary frames, ending with a summary frame, or an error frame if the extraction failed midway", "content": {frames.MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}}


def error_responses(*statuses: int) -> dict:
    """OpenAPI `responses` for the error statuses an endpoint may answer with."""
    out: dict = {}
    for status in statuses:
        out[status] = {"model": ErrorOut, "description": ERROR_STATUSES[status]}
        if status == 429:
            out[status]["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
    return out


class AgentState:
    """What the app holds between requests: the adapter, the allow rules, the slot counter."""

    def __init__(self, settings: AgentSettings):
        self.settings = settings
        self.adapter: Adapter = open_adapter(settings.db_url, statement_timeout_s=settings.statement_timeout_s)
        self.allow = parse_allow(settings.allow)
        self.slots = threading.BoundedSemaphore(settings.max_concurrent_extractions)

    def exposed(self) -> dict[str, TableInfo]:
        """The tables (and columns) this agent lets the warehouse read."""
        tables = {}
        for table in self.adapter.describe():
            if self.allow and table.name not in self.allow:
                continue
            cols = self.allow.get(table.name) if self.allow else None
            if cols is not None:
                table = TableInfo(
                    table.name,
                    tuple(c for c in table.columns if c.name in cols),
                    table.primary_key if set(table.primary_key) <= cols else (),
                    tuple(u for u in table.unique_keys if set(u) <= cols),
                )
            tables[table.name] = table
        return tables


#: Only documents the scheme in OpenAPI: authorize() parses and checks the header itself.
_bearer = HTTPBearer(auto_error=False, description="the agent's token (--token); needed on every call but /health when one is set")


def authorize(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """With a token configured, every call but /health needs `Authorization: Bearer TOKEN`."""
    token = request.app.state.agent.settings.token
    if token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # compare_digest: the time taken does not reveal how much of the token matched.
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
        raise _Unauthorized()


Authorized = Annotated[None, Depends(authorize)]


def create_app(settings: AgentSettings) -> FastAPI:
    state = AgentState(settings)
    app = FastAPI(title="deltasieve agent", version="0.1.0", description="Read-only agent next to a legacy database.")
    app.state.agent = state


    @app.exception_handler(AgentError)
    async def _agent_error(request: Request, exc: AgentError):
        headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, Busy) else None
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=headers)

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(request: Request, exc: _Unauthorized):
        return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.get("/health", response_model=Health, operation_id="health", tags=["health"])
    def health() -> Health:
        return Health()

    @app.get("/v1/schema", response_model=SchemaOut, operation_id="describe_schema", tags=["schema"], responses=error_responses(401, 503))
    def schema(_: Authorized) -> dict:
        return schema_to_json(state.adapter.dialect, list(state.exposed().values()))

    async def read_body(request: Request) -> list[frames.Frame]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise _TooLarge(settings.max_body_bytes)
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > settings.max_body_bytes:
                raise _TooLarge(settings.max_body_bytes)
        try:
            parsed = list(frames.read_frames([bytes(body)]))
        except frames.FrameError as exc:
            raise BadRequest(f"malformed body: {exc}") from None
        if not parsed or parsed[0].kind != frames.CONTROL:
            raise BadRequest(f"body must start with a JSON control frame ({frames.MEDIA_TYPE})")
        return parsed

    @app.exception_handler(_TooLarge)
    async def _too_large(request: Request, exc: _TooLarge):
        return JSONResponse({"detail": f"request body exceeds {exc.limit} bytes"}, status_code=413)

    def prepare(control, ) -> ValidatedQuery:
        return validate_site_query(control.site.sql, control.site.key, state.exposed(), state.adapter.dialect)

    def stream(work: Iterator[bytes]) -> StreamingResponse:
        if not state.slots.acquire(blocking=False):
            raise Busy(f"this agent already runs {settings.max_concurrent_extractions} extraction(s); retry later")

        def body() -> Iterator[bytes]:
            try:
                yield from work
            except AgentError as exc:
                log.warning("extraction failed: %s", exc.message)
                yield frames.json_frame(frames.ERROR, {"detail": exc.message, "status": exc.status, "transient": exc.transient})
            except Exception as exc:  # the status line is gone: report in-band
                log.exception("extraction failed")
                yield frames.json_frame(frames.ERROR, {"detail": f"agent error: {type(exc).__name__}: {exc}", "status": 500, "transient": False})
            finally:
                state.slots.release()

        return StreamingResponse(body(), media_type=frames.MEDIA_TYPE)

    @app.post("/v1/extract", operation_id="extract", tags=["extraction"], response_class=StreamingResponse, responses={200: FRAMES_ANSWER, **error_responses(*EXTRACTION_ERRORS)}, openapi_extra=FRAMES_BODY)
    async def extract(request: Request, _: Authorized):
        """Steps 2 and 3: units in, inserts / deletes / changed groups out (binary frames)."""
        parsed = await read_body(request)
        control = _parse(ExtractControl, parsed[0])
        query = prepare(control)
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
        work = Extraction(state.adapter, query, control.site.columns, units, seed=control.seed, bits=control.hash_bits, batch_rows=control.batch_rows, tuples=tuples, chunk_rows=settings.chunk_rows)
        return stream(work.run())

    @app.post("/v1/ranges", operation_id="range_checksums", tags=["extraction"], response_class=StreamingResponse, responses={200: FRAMES_ANSWER, **error_responses(*EXTRACTION_ERRORS)}, openapi_extra=FRAMES_BODY)
    async def ranges(request: Request, _: Authorized):
        """Range checksums: per key range, ship its rows or say whether its count and hash differ."""
        parsed = await read_body(request)
        control = _parse(RangesControl, parsed[0])
        query = prepare(control)
        _check_site_columns(query, control.site.columns)
        for f in parsed[1:]:
            if f.kind != frames.RANGES:
                raise BadRequest(f"unexpected frame kind {f.kind!r} in a ranges request")
        wanted = range_set(query.key, [_batch(f) for f in parsed[1:]])
        return stream(range_scan(state.adapter, query, wanted, seed=control.seed, bits=control.hash_bits, batch_rows=control.batch_rows, chunk_rows=settings.chunk_rows))

    @app.post("/v1/fetch", operation_id="fetch", tags=["extraction"], response_class=StreamingResponse, responses={200: FRAMES_ANSWER, **error_responses(*EXTRACTION_ERRORS)}, openapi_extra=FRAMES_BODY)
    async def fetch(request: Request, _: Authorized):
        """Current rows of the site query for the keys sent (binary frames)."""
        parsed = await read_body(request)
        control = _parse(FetchControl, parsed[0])
        query = prepare(control)
        keys: list = []
        for f in parsed[1:]:
            if f.kind != frames.FETCH_KEYS:
                raise BadRequest(f"unexpected frame kind {f.kind!r} in a fetch request")
            batch = _batch(f)
            _require(batch, query.key)
            keys.extend(key_values(batch, query.key))
        return stream(fetch_rows(state.adapter, query, keys, batch_rows=control.batch_rows, chunk_rows=settings.chunk_rows))

    return app


class _Unauthorized(Exception):
    pass


class _TooLarge(Exception):
    def __init__(self, limit: int):
        self.limit = limit


def _parse(model, frame: frames.Frame):
    from pydantic import ValidationError

    try:
        return model.model_validate_json(frame.payload)
    except ValidationError as exc:
        raise BadRequest(f"bad control message: {exc.errors(include_url=False)}") from None


def _batch(frame: frames.Frame):
    try:
        return frame.batch()
    except Exception as exc:
        raise BadRequest(f"frame {frame.kind!r} is not a valid Arrow stream: {exc}") from None


def _data(frame: frames.Frame, delta_kind: bytes):
    """A data frame's batch, delta-decoded if it is of the delta-coded kind."""
    batch = _batch(frame)
    if frame.kind != delta_kind:
        return batch
    try:
        return frames.delta_decode(batch)
    except frames.FrameError as exc:
        raise BadRequest(str(exc)) from None


def _require(batch, names) -> None:
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise BadRequest(f"frame lacks columns {missing}")
