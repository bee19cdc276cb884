"""GET /v1/audit: the audit log, newest first, for admin keys (the gate in auth.py refuses others)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.deps import CatalogDep
from service.key_models import AuditEntryOut
from service.models import error_responses

router = APIRouter(prefix="/v1/audit", tags=["audit"])

#: Entries one call returns at most: a longer history is read from SERVICE_AUDIT_FILE.
MAX_LIMIT = 10_000


@router.get("", response_model=list[AuditEntryOut], operation_id="read_audit", responses=error_responses(401, 403, 422))
def read_audit(catalog: CatalogDep, limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100) -> list[AuditEntryOut]:
    """Who changed or read what, when: every call that changes something and every read of a
    view's data (rows, delta, feed, sample), refused ones included, newest first."""
    return [AuditEntryOut(**entry) for entry in catalog.audit.recent(limit)]
