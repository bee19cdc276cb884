"""GET /metrics: the agent's counters in Prometheus' text format (remote_agent/metrics.py)."""

from fastapi import APIRouter
from fastapi.responses import Response

from remote_agent.deps import Authorized, StateDep
from remote_agent.metrics import MEDIA_TYPE
from remote_agent.routes.responses import error_responses

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    operation_id="metrics",
    response_class=Response,
    responses={
        200: {"content": {MEDIA_TYPE: {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
        **error_responses(401),
    },
)
def metrics(state: StateDep, _: Authorized) -> Response:
    """Requests whose client left before the agent read their body, by route (counters start at
    0 with the process)."""
    return Response(state.metrics.exposition(), media_type=MEDIA_TYPE)
