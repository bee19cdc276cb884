"""The warehouse service: create_app(settings) builds the FastAPI app."""

from __future__ import annotations

import contextlib
import logging

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from service.audit import AuditTrail
from service.auth import ApiKeyGate, check_limits
from service.catalog import Catalog
from service.errors import ServiceError
from service.jobs import SyncRunner
from service.limits import BodySizeLimit
from service.lineage_sender import Lineage
from service.metrics import ServiceMetrics
from service.publishing import Publisher
from service.readers import Readers
from service.retention import RetentionTask
from service.routes import audit, changes, health, keys, metrics, queue, sources, syncs, ui, views
from service.scheduler import Scheduler
from service.settings import ServiceSettings
from service.source_health import OK, SourceChecker, SourceHealth
from warehouse.errors import FormatError

log = logging.getLogger("service")


def create_app(settings: ServiceSettings, *, start_spark: bool = True) -> FastAPI:
    """Build the app. Spark starts in the lifespan, so /health answers only once it is up."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        app.state.catalog = Catalog(settings.data_dir / "catalog.db")
        secrets = settings.secrets()
        if secrets.has_key:  # secrets a catalog from before kept in clear are encrypted now
            sealed = app.state.catalog.rewrite_secrets(secrets.sealed_again, secrets.destination_sealed_again)
            if sealed:
                log.info("secrets encrypted under SERVICE_SECRET_KEY: %s", ", ".join(sealed))
        engine = None
        if start_spark:
            from service.engine import SparkEngine

            engine = SparkEngine(settings)
        app.state.engine = engine
        app.state.metrics = ServiceMetrics()
        app.state.metrics.seed(app.state.catalog)
        app.state.health = SourceHealth(on_change=lambda source, h: app.state.metrics.source(source, h.status == OK))
        app.state.lineage = Lineage(settings, app.state.catalog, app.state.metrics)
        # publishing reads committed deltas and rows with Arrow: it runs with or without Spark
        app.state.publisher = Publisher(settings, app.state.catalog, app.state.metrics, app.state.lineage.published)
        app.state.runner = SyncRunner(
            settings,
            app.state.catalog,
            engine,
            app.state.metrics,
            app.state.health,
            app.state.publisher.wake,
            app.state.lineage,
        )
        app.state.runner.recover()
        app.state.publisher.start()  # after recovery: syncs a crash left committed are succeeded
        app.state.readers = Readers()
        app.state.retention = RetentionTask(
            app.state.catalog,
            app.state.runner.store,
            app.state.readers,
            settings.keep_policy(),
            settings.retention_interval_s,
            # no sync is kept for a destination: those it still needs are newer than its applied
            # sync, inside the policy when it is; one further behind is rebuilt (publishing.py)
            needed=None,
        )
        background: list[RetentionTask | SourceChecker] = [app.state.retention]
        if engine:  # an app built without Spark (the OpenAPI export) contacts no agent
            background.append(
                SourceChecker(
                    app.state.catalog,
                    app.state.health,
                    settings.agent_verify(),
                    settings.secrets(),
                    settings.source_check_interval_s,
                )
            )
        for task in background:
            task.start()
        # scheduled syncs need Spark; an app built without it (the OpenAPI export) runs none
        app.state.scheduler = Scheduler(app.state.catalog, app.state.runner) if settings.scheduler and engine else None
        if app.state.scheduler:
            app.state.scheduler.start()
        try:
            yield
        finally:
            if app.state.scheduler:
                app.state.scheduler.stop()
            for task in background:
                task.stop()
            app.state.runner.shutdown()
            app.state.publisher.stop()
            app.state.lineage.stop()  # after the syncs and destinations that report to it
            app.state.catalog.close()

    app = FastAPI(
        title="deltasieve service",
        version="0.1.0",
        description="Keeps warehouse views in step with read-only legacy databases.",
        lifespan=lifespan,
        dependencies=[Depends(check_limits)],  # every route, one added later too
    )
    app.state.settings = settings

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    @app.exception_handler(FormatError)
    async def _format_error(request: Request, exc: FormatError):
        # State stored in another format (formats.py): the request is fine, the state is not this deltasieve's.
        return JSONResponse({"detail": exc.message}, status_code=409)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        errors = [_validation_item(e) for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    for module in (health, metrics, sources, views, syncs, queue, changes, keys, audit, ui):
        app.include_router(module.router)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    # no key, no further work: the gate runs before the body is read
    app.add_middleware(ApiKeyGate, key=settings.api_key, metrics_open=settings.metrics_open)
    app.add_middleware(AuditTrail, file=settings.audit_file)  # outermost: refused calls are recorded too
    return app


def _validation_item(error: dict) -> dict:
    """One request-validation error as the API reports it: where, what, which kind."""
    item = {k: v for k, v in error.items() if k in ("loc", "msg", "type")}
    reason = (error.get("ctx") or {}).get("error")
    if error.get("type") == "json_invalid" and reason:
        # "JSON decode error" alone does not say what to fix; the decoder's reason does.
        at = error["loc"][-1] if error.get("loc") and isinstance(error["loc"][-1], int) else None
        item["msg"] = f"{item['msg']}: {reason}" + (f" (position {at})" if at is not None else "")
    return item
