"""The API's models of sources: registration, changes, health, their tables, and mirroring."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deltasieve_protocol.models import TableOut
from service.models import (
    DESTINATIONS_HELP,
    MAX_EXCLUDED_COLUMNS,
    MAX_POLICIES,
    NAME_PATTERN,
    POLICY_COLUMNS_HELP,
    ROW_FILTER_HELP,
    SCHEDULE_HELP,
    SCHEMA_POLICY_HELP,
    STRATEGY_HELP,
    Destinations,
    PolicyName,
    ScheduleIn,
    Strategy,
    default_destinations,
)
from warehouse.view_options import DEFAULT_SCHEMA_POLICY, DEFAULT_STRATEGY, SchemaPolicy

#: What a bearer token may hold: it travels in an HTTP header.
TOKEN_PATTERN = r"^[!-~]+$"
TOKEN_HELP = (
    "the agent's bearer token (visible ASCII): env:NAME or file:/PATH, read by the service each time it is used, "
    "or the token itself, stored encrypted under SERVICE_SECRET_KEY (refused without it)"
)
CHECK_HELP = (
    "ask the agent for its schema before storing the source: an agent that does not answer or refuses the "
    "token is a 424 with the reason and nothing is stored (false: store it unchecked)"
)


class SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, description="letters, digits and _, as used in view SQL (source.table)")
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=2000, description="the agent's base URL")
    token: str | None = Field(default=None, max_length=4096, pattern=TOKEN_PATTERN, description=TOKEN_HELP)
    check: bool = Field(default=True, description=CHECK_HELP)


class SourcePatch(BaseModel):
    """A source's new agent URL or token (PATCH /v1/sources/{name}); left out: kept."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(
        default=None, pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=2000, description="the agent's new base URL"
    )
    token: str | None = Field(
        default=None,
        max_length=4096,
        pattern=TOKEN_PATTERN,
        description=f"{TOKEN_HELP}; null removes it, left out keeps it",
    )
    check: bool = Field(default=True, description=CHECK_HELP)


class SourceTablesOut(BaseModel):
    """What a source's agent exposes: its tables with their columns, types and keys."""

    source: str
    dialect: str = Field(description="the source's SQL dialect")
    tables: list[TableOut]


class SourceHealthOut(BaseModel):
    """How the source's agent answered the service's last contact with it (a sync's or the periodic check's)."""

    status: Literal["ok", "unreachable", "refused"] = Field(
        description="ok: it answered; refused: it answered no (a wrong token); unreachable: no answer, or one a retry may change"
    )
    checked_at: str = Field(description="when the service last contacted the agent (ISO 8601, UTC)")
    since: str = Field(description="since when the agent has answered so (ISO 8601, UTC)")
    error: str | None = Field(default=None, description="why it is not ok, as the agent or the link said")


class SourceOut(BaseModel):
    name: str
    url: str
    has_token: bool
    token_reference: str | None = Field(
        default=None,
        description="where the token is read from (env:NAME or file:/PATH); null for a literal token or none",
    )
    created_at: str
    health: SourceHealthOut | None = Field(
        default=None,
        description="the source's health; null until the service contacted its agent (the periodic check does at start "
        "and every SERVICE_SOURCE_CHECK_INTERVAL_S)",
    )


#: The most tables one mirror request may name.
MAX_MIRROR_TABLES = 10_000


class MirrorIn(BaseModel):
    """What POST /v1/sources/{name}/mirror makes a table view of, and the settings of the views it creates."""

    model_config = ConfigDict(extra="forbid")
    tables: list[Annotated[str, Field(min_length=1, max_length=400)]] | None = Field(
        default=None,
        max_length=MAX_MIRROR_TABLES,
        description="the tables to mirror, as GET /v1/sources/{name}/tables names them (schema.table outside the "
        "default schema); left out or null: every table the agent exposes",
    )
    exclude_columns: list[Annotated[str, Field(min_length=1, max_length=400)]] = Field(
        default=[],
        max_length=MAX_EXCLUDED_COLUMNS,
        description="columns the views leave out (one the tool cannot read, or one the warehouse should not hold): "
        "table.column for one table's, a bare column name for that column of every table; not a key column (its "
        "table is then skipped with the reason)",
    )
    columns: dict[Annotated[str, Field(min_length=3, max_length=400)], PolicyName] | None = Field(
        default=None,
        max_length=MAX_POLICIES,
        description=f"{POLICY_COLUMNS_HELP}; each view made takes those of its table",
    )
    row_filter: (
        dict[Annotated[str, Field(min_length=1, max_length=400)], Annotated[str, Field(max_length=10_000)]] | None
    ) = Field(default=None, max_length=MAX_POLICIES, description=f"{ROW_FILTER_HELP}; each view made takes its table's")
    schedule: ScheduleIn | None = Field(
        default=None,
        description=f"{SCHEDULE_HELP}. Given, the scheduler syncs each new view at once (as many at a time as the "
        "service runs syncs), then every every_s",
    )
    strategy: Strategy = Field(default=DEFAULT_STRATEGY, description=STRATEGY_HELP)
    on_schema_change: SchemaPolicy = Field(default=DEFAULT_SCHEMA_POLICY, description=SCHEMA_POLICY_HELP)
    destinations: Destinations = Field(
        default_factory=default_destinations,
        description=f'{DESTINATIONS_HELP}, for each view created. Left out: [{{"kind": "delta"}}]',
    )


class MirroredOut(BaseModel):
    """A table of a mirror and its view."""

    table: str = Field(description="the table, as the agent names it")
    view: str = Field(description="the view of every column of it")
    key: list[str] = Field(description="the view's key; empty: the table has none, the view is a multiset")


class MirrorSkippedOut(BaseModel):
    """A table a mirror made no view of, and why."""

    table: str
    reason: str


class MirrorOut(BaseModel):
    """What a mirror request did, table by table."""

    created: list[MirroredOut] = Field(description="the views this request created")
    existing: list[MirroredOut] = Field(description="the tables whose view an earlier mirror created (left unchanged)")
    skipped: list[MirrorSkippedOut] = Field(
        description="the tables no view could keep, or whose view name another view has (name taken)"
    )
