"""The service's API key: when SERVICE_API_KEY is set, every mutating call must carry it."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

#: Methods that change something; reading stays open.
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WRONG_KEY = "missing or wrong API key (send X-API-Key or Authorization: Bearer)"


def key_matches(expected: SecretStr, headers: Mapping[str, str]) -> bool:
    """Whether `X-API-Key` (or else a Bearer token) is the key, compared in constant time."""
    given = headers.get("x-api-key")
    if given is None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        given = token if scheme.lower() == "bearer" else ""
    # compare_digest: the time taken does not reveal how much of the key matched.
    return hmac.compare_digest(given.encode(), expected.get_secret_value().encode())


class ApiKeyGate:
    """ASGI middleware: a mutating request without the key gets 401 before its body is read.

    Checking here rather than only in a route dependency covers every route, also one
    added later, and answers 401 even where FastAPI would first refuse a malformed body.
    """

    def __init__(self, app: ASGIApp, key: SecretStr | None):
        self.app = app
        self.key = key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.key is not None and scope["method"] in MUTATING_METHODS:
            if not key_matches(self.key, Headers(scope=scope)):
                body = json.dumps({"detail": WRONG_KEY}).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
