"""The service's door: once any API key is configured, every call but GET /health needs one.

SERVICE_API_KEY is the admin key; keys made through POST /v1/keys (service/keys.py) have a
scope (read, sync, admin) and may be limited to named views and sources. Every check is made
so that a route added later is covered without anything to remember: the scope a call needs
follows from its method and path (the middleware ApiKeyGate, before anything else runs),
the view or source it reaches from the path parameters of the route FastAPI chose (the
app-wide dependency check_limits).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Mapping

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import Forbidden, NotFound
from service.keys import SERVICE_KEY_NAME, Grant, digest

#: Methods that change something.
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WRONG_KEY = "missing or wrong API key (send X-API-Key or Authorization: Bearer)"
#: Calls that need no key: the readiness probe, and the dashboard's static page and assets
#: (the page asks for a key when the API answers 401).
OPEN = (("/health", ""), ("/ui", "/ui/"))
#: Paths that start or cancel syncs (POST /v1/views/{name}/syncs, DELETE .../syncs/{id}, and
#: DELETE /v1/syncs, which cancels queued ones): scope `sync`.
SYNC_PATH = re.compile(r"^/v1/(views/[^/]+/syncs(/[^/]+)?|syncs)/?$")
#: Routes that need an admin key to read too: keys and the audit log.
ADMIN_ROUTES = ("/v1/keys", "/v1/audit")
#: Routes without a view or source name that a limited key may call: the lists (which show
#: only what it may see) and the API's description. Any other such route (keys, the audit,
#: /metrics, creating a view or source, one added later) needs a key without limits.
LIMITED_MAY_CALL = frozenset(
    {("GET", "/v1/views"), ("GET", "/v1/sources"), ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")}
)


def given_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries: `X-API-Key`, or else a Bearer token."""
    given = headers.get("x-api-key")
    if given is None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        given = token if scheme.lower() == "bearer" and token else None
    return given


def key_matches(expected: SecretStr, headers: Mapping[str, str]) -> bool:
    """Whether the request carries the key `expected`, compared in constant time."""
    given = given_key(headers) or ""
    # digests of equal length: the time taken reveals neither the key's length nor how much matched
    return hmac.compare_digest(digest(given), digest(expected.get_secret_value()))


def needed_scope(method: str, path: str) -> str:
    """The scope a call needs, from its method and path.

    >>> needed_scope("GET", "/v1/views/v/rows"), needed_scope("POST", "/v1/views/v/syncs")
    ('read', 'sync')
    >>> needed_scope("DELETE", "/v1/views/v/syncs/s"), needed_scope("DELETE", "/v1/views/v")
    ('sync', 'admin')
    >>> needed_scope("DELETE", "/v1/syncs"), needed_scope("DELETE", "/v1/syncs/s")
    ('sync', 'admin')
    >>> needed_scope("GET", "/v1/keys"), needed_scope("GET", "/v1/audit"), needed_scope("GET", "/v1/keysx")
    ('admin', 'admin', 'read')
    """
    if path.rstrip("/") in ADMIN_ROUTES or path.startswith(tuple(p + "/" for p in ADMIN_ROUTES)):
        return "admin"
    if method not in MUTATING_METHODS:
        return "read"
    if SYNC_PATH.match(path) and method in ("POST", "DELETE"):
        return "sync"
    return "admin"


class ApiKeyGate:
    """ASGI middleware: authenticates every request and checks its scope and limits, before
    the body is read; puts the key's name in the request's state (`key_name`, "admin" for
    SERVICE_API_KEY, None when no key is configured) and what it allows (`grant`)."""

    def __init__(self, app: ASGIApp, key: SecretStr | None, metrics_open: bool = False):
        self.app = app
        self.key_digest = digest(key.get_secret_value()) if key is not None else None
        self.metrics_open = metrics_open

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        state["key_name"] = None
        state["grant"] = None
        catalog = getattr(getattr(scope.get("app"), "state", None), "catalog", None)
        configured = self.key_digest is not None or (catalog is not None and catalog.keys.any())
        if not configured or self._open(scope):
            return await self.app(scope, receive, send)
        grant = self._authenticate(Headers(scope=scope), catalog)
        if grant is None:
            return await _refuse(send, 401, WRONG_KEY)
        state["key_name"] = grant.name  # known from here on, also to the audit log of a refused call
        needed = needed_scope(scope["method"], scope["path"])
        if not grant.allows(needed):
            return await _refuse(send, 403, f"key {grant.name!r} has scope {grant.scope!r}; this call needs {needed!r}")
        state["grant"] = grant
        await self.app(scope, receive, send)

    def _open(self, scope: Scope) -> bool:
        if scope["method"] not in ("GET", "HEAD"):
            return False
        path = scope["path"]
        if path == "/metrics":
            return self.metrics_open
        return any(path == exact or (prefix and path.startswith(prefix)) for exact, prefix in OPEN)

    def _authenticate(self, headers: Headers, catalog) -> Grant | None:
        given = given_key(headers)
        if given is None:
            return None
        given_digest = digest(given)
        found = catalog.keys.find(given_digest) if catalog is not None else None
        if self.key_digest is not None and hmac.compare_digest(self.key_digest, given_digest):
            found = Grant(SERVICE_KEY_NAME, "admin")
        return found


def check_limits(request: Request) -> None:
    """Refuse (403) a key limited to named views and sources a call outside them.

    An app-wide dependency (create_app), so it runs for every route, one added later too,
    with the route FastAPI chose and its path parameters: the view or source named by
    `/v1/views/{name}...` or `/v1/sources/{name}...`. A route without such a name needs a key
    without limits, but for those in LIMITED_MAY_CALL.
    """
    grant: Grant | None = getattr(request.state, "grant", None)
    if grant is None or not grant.limited:
        return
    route = request.scope.get("route")
    template = getattr(route, "path", "")
    name = request.path_params.get("name", "")
    refused = None
    if template.startswith("/v1/views/{name}"):
        catalog = getattr(request.app.state, "catalog", None)
        if not grant.may_see_view(name, _reads(catalog, name)):
            refused = f"view {name!r} is not among those it may reach"
    elif template.startswith("/v1/sources/{name}"):
        if not grant.may_see_source(name):
            refused = f"source {name!r} is not among those it may reach"
    elif (request.method if request.method != "HEAD" else "GET", template) not in LIMITED_MAY_CALL:
        refused = f"{request.method} {template} needs a key without view or source limits"
    if refused:
        raise Forbidden(f"key {grant.name!r} is limited: {refused}")


def _reads(catalog, view: str) -> set[str]:
    """The sources a view reads; none for a view that does not exist."""
    if catalog is None:
        return set()
    try:
        return {site["source"] for site in catalog.view(view).definition.get("sites", [])}
    except NotFound:  # a limited key learns nothing of a view it does not name
        return set()


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
