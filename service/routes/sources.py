"""Sources: the agents the warehouse reads from."""

from __future__ import annotations

from fastapi import APIRouter, status

from service.deps import ApiKey, CatalogDep
from service.models import SourceIn, SourceOut, error_responses
from service.records import SourceRecord

router = APIRouter(prefix="/v1/sources", tags=["sources"])


def _out(row: SourceRecord) -> SourceOut:
    # The token is a secret: say whether there is one, never what it is.
    return SourceOut(name=row.name, url=row.url, has_token=bool(row.token), created_at=row.created_at)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SourceOut,
    operation_id="create_source",
    responses=error_responses(401, 409, 422),
)
def create_source(body: SourceIn, catalog: CatalogDep, _: ApiKey) -> SourceOut:
    return _out(catalog.add_source(body.name, body.url.rstrip("/"), body.token))


@router.get("", response_model=list[SourceOut], operation_id="list_sources")
def list_sources(catalog: CatalogDep) -> list[SourceOut]:
    return [_out(r) for r in catalog.sources()]


@router.get("/{name}", response_model=SourceOut, operation_id="get_source", responses=error_responses(404, 422))
def get_source(name: str, catalog: CatalogDep) -> SourceOut:
    return _out(catalog.source(name))
