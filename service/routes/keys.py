"""/v1/keys: the API keys, made, listed and revoked by an admin key (the gate in auth.py
refuses any other)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.deps import ApiKey, CatalogDep
from service.errors import Conflict
from service.key_models import KeyCreated, KeyIn, KeyOut
from service.keys import SERVICE_KEY_NAME
from service.models import error_responses

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post(
    "",
    status_code=201,
    response_model=KeyCreated,
    operation_id="create_key",
    responses=error_responses(401, 403, 409, 422),
)
def create_key(body: KeyIn, catalog: CatalogDep, _: ApiKey) -> KeyCreated:
    """Make a key; the answer is the only time the key is shown."""
    if body.name == SERVICE_KEY_NAME:
        raise Conflict(f"the name {SERVICE_KEY_NAME!r} is SERVICE_API_KEY's; choose another")
    record, key = catalog.keys.add(body.name, body.scope, body.views, body.sources)
    return KeyCreated(**record, key=key)


@router.get("", response_model=list[KeyOut], operation_id="list_keys", responses=error_responses(401, 403))
def list_keys(catalog: CatalogDep) -> list[KeyOut]:
    """Every key made through the API (not SERVICE_API_KEY), without the keys themselves."""
    return [KeyOut(**record) for record in catalog.keys.list()]


@router.delete("/{name}", status_code=204, operation_id="revoke_key", responses=error_responses(401, 403, 404, 422))
def revoke_key(name: str, catalog: CatalogDep, _: ApiKey) -> Response:
    """Revoke a key: from the next call on, it is refused with 401."""
    catalog.keys.revoke(name)
    return Response(status_code=204)
