"""The tables and columns this agent exposes, with their logical types and keys."""

from __future__ import annotations

from fastapi import APIRouter

from protocol.models import SchemaOut
from protocol.schema import schema_to_json
from remote_agent.deps import Authorized, StateDep
from remote_agent.routes.responses import error_responses

router = APIRouter(tags=["schema"])


@router.get("/v1/schema", response_model=SchemaOut, operation_id="describe_schema", responses=error_responses(401, 503))
def schema(state: StateDep, _: Authorized) -> dict:
    return schema_to_json(state.adapter.dialect, list(state.exposed().values()))
