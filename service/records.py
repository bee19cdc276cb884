"""The catalog's records as it reads them back: a source, a view, a sync."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warehouse.view_options import ViewOptions


@dataclass(frozen=True)
class SourceRecord:
    """A registered agent."""

    name: str
    url: str
    #: The agent's bearer token (a secret: the API says only whether there is one).
    token: str | None
    created_at: str


@dataclass(frozen=True)
class ViewRecord:
    """A view: its SQL, the checked definition it asks for (ViewDef's JSON) and its options.

    What its stored rows follow is their version's to say (service/redefinitions.py)."""

    name: str
    sql: str
    definition: dict[str, Any]
    options: ViewOptions
    created_at: str


@dataclass(frozen=True)
class SyncRecord:
    """One sync of a view, from queued to succeeded or failed."""

    id: str
    view: str
    status: str
    error: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    metrics: dict[str, Any]
    #: What a running sync reports of its phase (None once it ended).
    progress: dict[str, Any] | None
    #: What started it: "api" (POST .../syncs) or "schedule"; "redefine" for a sync that
    #: applies a redefinition, whatever started it; "retry" for the one retry of a sync the
    #: service's stop interrupted (`retry_of` names that one; "redefine" still wins).
    trigger: str
    #: What kind of failure it had, for programs ("schema_changed", "cancelled"); None otherwise.
    error_code: str | None = None
    #: Seconds from queued to running (None while queued, and for a sync cancelled before it ran).
    queued_s: float | None = None
    #: Whether it compares every row of the view with the source (?verify=true).
    verify: bool = False
    #: The interrupted sync this one retries (trigger "retry"); None otherwise.
    retry_of: str | None = None
