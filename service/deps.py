"""Dependencies of the routes, declared once."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from pyspark.sql import SparkSession

from service.auth import WRONG_KEY, key_matches
from service.catalog import Catalog
from service.deltaformat import FORMAT_HELP, Format
from service.errors import Unauthorized
from service.jobs import SyncRunner
from service.keys import Grant
from service.metrics import ServiceMetrics
from service.publishing import Publisher
from service.readers import Readers
from service.scheduler import Scheduler
from service.settings import ServiceSettings
from service.source_health import SourceHealth


def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


def get_catalog(request: Request) -> Catalog:
    return request.app.state.catalog


def get_runner(request: Request) -> SyncRunner:
    return request.app.state.runner


def get_publisher(request: Request) -> Publisher | None:
    """The thread that applies views to their destinations (None in an app whose lifespan did not run)."""
    return getattr(request.app.state, "publisher", None)


def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


def get_scheduler(request: Request) -> Scheduler | None:
    """The thread running scheduled syncs; None when the service runs none (SERVICE_SCHEDULER off)."""
    return getattr(request.app.state, "scheduler", None)


def get_readers(request: Request) -> Readers:
    return request.app.state.readers


def get_health(request: Request) -> SourceHealth:
    return request.app.state.health


def get_spark(request: Request) -> SparkSession:
    return request.app.state.engine.current()[0]


def require_api_key(request: Request) -> None:
    """Mutating calls need a key when SERVICE_API_KEY is configured (X-API-Key or Bearer).

    The app's ApiKeyGate checks every call, with its scope; this marks the routes that change
    something and holds for an app mounted without the middleware (which then knows only
    SERVICE_API_KEY). A request the gate let through carries its key's name.
    """
    if getattr(request.state, "key_name", None) is not None:
        return
    key = request.app.state.settings.api_key
    if key is not None and not key_matches(key, request.headers):
        raise Unauthorized(WRONG_KEY)


def get_grant(request: Request) -> Grant | None:
    """What the request's key allows (None: no key is configured, the service is open)."""
    return getattr(request.state, "grant", None)


SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
RunnerDep = Annotated[SyncRunner, Depends(get_runner)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
ReadersDep = Annotated[Readers, Depends(get_readers)]
HealthDep = Annotated[SourceHealth, Depends(get_health)]
PublisherDep = Annotated[Publisher | None, Depends(get_publisher)]
SchedulerDep = Annotated[Scheduler | None, Depends(get_scheduler)]
SparkDep = Annotated[SparkSession, Depends(get_spark)]
ApiKey = Annotated[None, Depends(require_api_key)]
GrantDep = Annotated[Grant | None, Depends(get_grant)]
FormatQuery = Annotated[Format, Query(alias="format", description=FORMAT_HELP)]
WithBeforeQuery = Annotated[
    bool,
    Query(
        description="updates also carry the row they replaced ('before'); costs a filtered read of the view's version before the first sync asked for, or, when that version is no longer stored, of every delta since the view's load (see README)"
    ),
]
