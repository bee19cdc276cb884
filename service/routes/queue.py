"""The sync queue as a whole: cancel many queued syncs in one call."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.deps import ApiKey, CatalogDep, RunnerDep
from service.errors import Unprocessable
from service.models import SyncsCancelled, error_responses

router = APIRouter(prefix="/v1/syncs", tags=["syncs"])


@router.delete(
    "",
    response_model=SyncsCancelled,
    operation_id="cancel_queued_syncs",
    responses=error_responses(401, 403, 404, 422),
)
def cancel_queued_syncs(
    catalog: CatalogDep,
    runner: RunnerDep,
    _: ApiKey,
    status: Annotated[
        str,
        Query(description="the syncs to cancel: `queued` (the only one; a running sync is cancelled on its own)"),
    ],
    view: Annotated[
        list[str] | None, Query(description="only the queued syncs of these views (repeat the parameter)")
    ] = None,
) -> SyncsCancelled:
    """Cancel the queued syncs, all of them or those of the views named: they never run and end
    `failed` with error_code `cancelled`, as one DELETE each would end them, in one call and one
    write of the catalog. Running syncs go on (DELETE /v1/views/{name}/syncs/{id} stops one)."""
    if status != "queued":
        raise Unprocessable(
            f"status={status!r}: only queued syncs are cancelled together (status=queued); "
            "cancel a running sync on its own: DELETE /v1/views/{name}/syncs/{id}"
        )
    for name in view or ():
        catalog.view(name)  # 404 for a view that does not exist
    return SyncsCancelled(cancelled=runner.cancel_queued(set(view) if view is not None else None))
