from fastapi import APIRouter

from service.models import Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, operation_id="health")
def health() -> Health:
    return Health()
