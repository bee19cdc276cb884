"""The API's models of API keys (service/keys.py, routes/keys.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Scope = Literal["read", "sync", "admin"]
SCOPE_HELP = (
    "read: every GET of views, sources, syncs and their data; sync: read, and start and cancel syncs; "
    "admin: everything, keys and the audit log included"
)
#: Names a key may be limited to at most, of each kind: a longer list is a view or source catalog of its own.
MAX_LIMIT_NAMES = 1000


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="letters, digits, _ . and -, unique")
    scope: Scope = Field(description=SCOPE_HELP)
    views: list[str] | None = Field(
        default=None,
        max_length=MAX_LIMIT_NAMES,
        description="limit the key to these views (absent: not limited; a limited key reaches only the views "
        "it names and those reading only sources it names)",
    )
    sources: list[str] | None = Field(
        default=None,
        max_length=MAX_LIMIT_NAMES,
        description="limit the key to these sources (and the views reading only them)",
    )


class KeyOut(BaseModel):
    """A key as listed: never the key itself, nor its digest."""

    name: str
    scope: Scope
    views: list[str] | None
    sources: list[str] | None
    created_at: str


class KeyCreated(KeyOut):
    key: str = Field(description="the key, shown this once: the service keeps only its SHA-256")


class AuditEntryOut(BaseModel):
    """One call in the audit log."""

    at: str = Field(description="when the answer was sent (UTC, ISO 8601)")
    key_name: str | None = Field(
        description='the key\'s name ("admin": SERVICE_API_KEY; null: no key configured, or none valid)'
    )
    method: str
    route: str = Field(description="the path called")
    view: str | None
    source: str | None
    status: int
    rows: int | None = Field(description="lines of an NDJSON answer (rows, delta or feed lines); null when not known")
