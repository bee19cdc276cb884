"""Request and response models of the service API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


class SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, description="letters, digits and _, as used in view SQL (source.table)")
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=2000, description="the agent's base URL")
    token: str | None = Field(default=None, max_length=4096, description="bearer token of the agent")


class SourceOut(BaseModel):
    name: str
    url: str
    has_token: bool
    created_at: str


Strategy = Literal["group_hash", "tuple_hash", "range_checksum", "full_ship"]
STRATEGY_HELP = "how syncs find changes: group_hash (the paper's method), tuple_hash (one 64-bit hash per tuple), range_checksum (key ranges with checksums, bisected), full_ship (the whole site query)"


class ViewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    sql: str = Field(min_length=1, max_length=100_000)
    strategy: Strategy = Field(default="group_hash", description=STRATEGY_HELP)


class ViewRedefine(BaseModel):
    """A new definition for an existing view (PUT /v1/views/{name})."""

    model_config = ConfigDict(extra="forbid")
    sql: str = Field(min_length=1, max_length=100_000)
    strategy: Strategy = Field(default="group_hash", description=STRATEGY_HELP)


class SiteOut(BaseModel):
    source: str
    sql: str
    columns: list[dict]
    key: list[str]


class ViewOut(BaseModel):
    name: str
    sql: str
    columns: list[str]
    column_types: dict[str, str]
    key: list[str]
    sites: list[SiteOut]
    strategy: str
    created_at: str


class SyncOut(BaseModel):
    id: str
    view: str
    status: Literal["queued", "running", "succeeded", "failed"]
    error: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    metrics: dict[str, Any]
    progress: dict[str, Any] | None = None


class SyncQueued(BaseModel):
    id: str
    status: Literal["queued"]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
