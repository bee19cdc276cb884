from fastapi import APIRouter

from deltasieve_protocol.models import Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, operation_id="health")
def health() -> Health:
    return Health()
