"""The agent's HTTP API: create_app(settings) builds the FastAPI app."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from deltasieve_protocol import error_codes
from remote_agent import readahead
from remote_agent.deps import TooLarge, Unauthorized
from remote_agent.errors import AgentError, Busy
from remote_agent.routes import extraction, health, metrics, schema
from remote_agent.routes.responses import RETRY_AFTER_S
from remote_agent.settings import AgentSettings
from remote_agent.state import AgentState

log = logging.getLogger("remote_agent")


def create_app(settings: AgentSettings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if settings.read_ahead:
            readahead.start(app.state.agent.adapter.reader_preload)
        yield
        app.state.agent.reconciliations.close()  # their spilled keys, on the agent's disk

    app = FastAPI(
        title="deltasieve agent",
        version="0.1.0",
        description="Read-only agent next to a legacy database.",
        lifespan=lifespan,
    )
    app.state.agent = AgentState(settings)

    @app.exception_handler(AgentError)
    async def _agent_error(request: Request, exc: AgentError):
        headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, Busy) else None
        return JSONResponse({"detail": exc.message, **exc.fields()}, status_code=exc.status, headers=headers)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(request: Request, exc: Unauthorized):
        return JSONResponse(
            {"detail": "missing or wrong bearer token", "code": error_codes.UNAUTHORIZED},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(TooLarge)
    async def _too_large(request: Request, exc: TooLarge):
        return JSONResponse(
            {"detail": f"request body exceeds {exc.limit} bytes", "code": error_codes.BODY_TOO_LARGE}, status_code=413
        )

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect):
        # The client closed the connection before the body was read: a warehouse that cancels
        # or stops a sync shuts its calls, and an agent with a queue of requests may come to
        # this one's body after that. Nothing was read, nobody waits for an answer.
        route = getattr(request.scope.get("route"), "path", request.url.path)
        request.app.state.agent.metrics.abandoned(route)
        log.info("%s %s: the client left before the agent read its body; request ended", request.method, route)
        return Response(status_code=400)  # written to no one: the server drops what follows a disconnect

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return JSONResponse(
            {"detail": jsonable_encoder(exc.errors()), "code": error_codes.INVALID_REQUEST}, status_code=422
        )

    for module in (health, schema, extraction, metrics):
        app.include_router(module.router)
    # each route that reads a body of frames shows its count of abandoned requests from the start
    app.state.agent.metrics.expect(route.path for route in extraction.router.routes if isinstance(route, APIRoute))
    return app
