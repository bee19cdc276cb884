"""The tables and columns this agent exposes, with their logical types and keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from deltasieve_protocol.models import ColumnSampleOut, ColumnSampleRequest, SchemaOut
from deltasieve_protocol.schema import schema_to_json
from remote_agent.column_types import sample_column
from remote_agent.deps import Authorized, StateDep, version_mismatch
from remote_agent.errors import BadRequest
from remote_agent.routes.responses import error_responses

router = APIRouter(tags=["schema"])


@router.get("/v1/schema", response_model=SchemaOut, operation_id="describe_schema", responses=error_responses(401, 503))
def schema(
    state: StateDep,
    _: Authorized,
    table: Annotated[
        list[str] | None,
        Query(max_length=1000, description="only these tables (repeatable); an unknown or hidden one is left out"),
    ] = None,
) -> dict:
    """The exposed tables, or those of them named by `table`."""
    exposed = state.exposed()
    tables = list(exposed.values()) if table is None else [exposed[t] for t in dict.fromkeys(table) if t in exposed]
    return schema_to_json(state.adapter.dialect, tables)


@router.post(
    "/v1/column_sample",
    response_model=ColumnSampleOut,
    operation_id="column_sample",
    responses=error_responses(400, 401, 403, 409, 422, 503),
)
def column_sample(request: ColumnSampleRequest, state: StateDep, _: Authorized) -> ColumnSampleOut:
    """Read at most `rows` values of one column (half the first rows in key order, half the last) as a stronger type than declared.

    The warehouse checks a view's `column_types` with it when the view is defined: the
    answer counts the values read and the NULLs, and quotes the first value that does not
    read as the asked type with its row's key.
    """
    mismatch = version_mismatch(request.protocol)
    if mismatch:
        raise BadRequest(mismatch)
    return sample_column(state.adapter.pinned(None), state.exposed(), request)
