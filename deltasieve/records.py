"""What the service answers, typed: a sync's record, a view."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The statuses a sync ends in.
FINISHED = ("succeeded", "failed")


@dataclass(frozen=True)
class Sync:
    """A sync's record (GET /v1/views/{name}/syncs/{id}); `record` holds every field the service sent."""

    id: str
    view: str
    status: str  # queued | running | succeeded | failed
    error: str | None = None
    error_code: str | None = None
    trigger: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict) -> Sync:
        """
        >>> Sync.from_json({"id": "s1", "view": "v", "status": "queued", "extra": 1}).finished
        False
        """
        return cls(
            id=data["id"],
            view=data["view"],
            status=data["status"],
            error=data.get("error"),
            error_code=data.get("error_code"),
            trigger=data.get("trigger"),
            created_at=data.get("created_at"),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            metrics=data.get("metrics") or {},
            record=data,
        )

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


@dataclass(frozen=True)
class View:
    """A view (GET /v1/views/{name}); `record` holds every field the service sent."""

    name: str
    sql: str
    columns: list[str]
    column_types: dict[str, str]
    key: list[str]
    #: seconds between the end of a sync and the next, when the service syncs the view by itself
    every_s: int | None = None
    #: when the view's last succeeded sync started (the age of its rows); None before one
    data_as_of: str | None = None
    #: where it is published, each with `applied_sync`, `lag_syncs` and its last `error`
    destinations: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict) -> View:
        """
        >>> View.from_json({"name": "v", "sql": "SELECT 1", "columns": ["a"], "column_types": {"a": "int"},
        ...                 "key": ["a"], "schedule": {"every_s": 60}}).every_s
        60
        """
        return cls(
            name=data["name"],
            sql=data["sql"],
            columns=list(data["columns"]),
            column_types=dict(data["column_types"]),
            key=list(data["key"]),
            every_s=(data.get("schedule") or {}).get("every_s"),
            data_as_of=data.get("data_as_of"),
            destinations=list(data.get("destinations") or []),
            record=data,
        )
