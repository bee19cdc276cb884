"""The tables and columns this agent exposes, with their logical types and keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from protocol.models import SchemaOut
from protocol.schema import schema_to_json
from remote_agent.deps import Authorized, StateDep
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
