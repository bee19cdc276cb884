"""GET /metrics: the service's Prometheus metrics (metrics.py). Once a key is configured it
needs one (a key without view or source limits: it names every view), unless
SERVICE_METRICS_OPEN=true opens it to a scraper (auth.py)."""

from fastapi import APIRouter
from fastapi.responses import Response

from service.deps import CatalogDep, MetricsDep
from service.metrics import MEDIA_TYPE

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    operation_id="metrics",
    response_class=Response,
    responses={200: {"content": {MEDIA_TYPE: {"schema": {"type": "string"}}}, "description": "Prometheus text format"}},
)
def metrics(registry: MetricsDep, catalog: CatalogDep) -> Response:
    """Sync counts and durations, bytes to and from the agents, rows changed, last success and
    data age per view (0 for a view that never succeeded), each source's health, syncs running
    and each scheduled view's interval, in Prometheus' text format (counters start at 0 with
    the process)."""
    registry.catalogued(catalog.view_names())
    registry.schedules({s.view: s.every_s for s in catalog.schedules()})
    return Response(registry.exposition(), media_type=MEDIA_TYPE)
