"""A small client of the service's REST API: every answer checked, every error a CliError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from deltasieve_cli.errors import ServiceError, Unreachable

#: Seconds to wait for the service to accept a connection: a service that is up answers at once.
CONNECT_TIMEOUT_S = 5.0
#: Seconds without a byte of an answer before giving up (a view's rows stream as they are read).
READ_TIMEOUT_S = 120.0


def describe_detail(body: object) -> str:
    """The `detail` of an error answer as one readable line.

    >>> describe_detail({"detail": "view 'x' not found"})
    "view 'x' not found"
    >>> describe_detail({"detail": [{"loc": ["body", "name"], "msg": "bad name", "type": "x"}]})
    'body.name: bad name'
    """
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict) and "msg" in item:
                loc = ".".join(str(p) for p in item.get("loc", []))
                parts.append(f"{loc}: {item['msg']}" if loc else item["msg"])
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return detail if isinstance(detail, str) else json.dumps(detail)


class Client:
    """The service at `url`; `api_key` is sent as X-API-Key on every call."""

    def __init__(self, url: str, api_key: str | None = None):
        self.url = url.rstrip("/")
        headers = {"X-API-Key": api_key} if api_key else {}
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            response.read()
            try:
                detail = describe_detail(response.json())
            except ValueError:
                detail = response.text.strip() or response.reason_phrase
            if response.status_code == 401:
                detail += " (give a key of the service with --api-key or DELTASIEVE_API_KEY)"
            raise ServiceError(response.status_code, detail, response.request.method, response.request.url.path)
        return response

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            return self._check(self.http.request(method, path, **kwargs))
        except httpx.TransportError as exc:
            raise Unreachable(self.url, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None

    def get(self, path: str, **params) -> Any:
        """The decoded JSON answer to a GET (Any: its shape is the endpoint's, documented in openapi/)."""
        return self.request("GET", path, params=params or None).json()

    def post(self, path: str, body: dict | None = None, **params) -> Any:
        return self.request("POST", path, json=body, params=params or None).json()

    def put(self, path: str, body: dict) -> Any:
        return self.request("PUT", path, json=body).json()

    def patch(self, path: str, body: dict) -> Any:
        return self.request("PATCH", path, json=body).json()

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    @contextmanager
    def stream(self, path: str, **params) -> Iterator[tuple[Iterator[str], httpx.Headers]]:
        """The lines of an NDJSON answer, read as they arrive, and its headers."""
        try:
            with self.http.stream("GET", path, params=params or None) as response:
                self._check(response)
                yield (line for line in response.iter_lines() if line), response.headers
        except httpx.TransportError as exc:
            raise Unreachable(self.url, f"{type(exc).__name__}: {exc}") from None

    @contextmanager
    def lines(self, path: str, **params) -> Iterator[Iterator[str]]:
        """The lines of an NDJSON answer, read as they arrive."""
        with self.stream(path, **params) as (lines, _):
            yield lines
