"""A typed client of a deltasieve service's REST API, for scripts and orchestrators.

    from deltasieve.client import Client

    with Client("http://deltasieve:8000", api_key="...") as service:
        sync = service.sync("orders")          # starts a sync, waits for its end
        print(sync.metrics["rows_inserted"])   # SyncFailed raised instead if it failed

`sync(view)` starts a sync and follows its record until it ends (`wait=False`: returns the
queued record at once; `wait(view, id)` follows it later). Every answer is checked: an error
status raises ServiceError with the service's `detail`, no answer Unreachable, a failed sync
SyncFailed (deltasieve/errors.py). The `deltasieve` command is built on this client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from deltasieve.errors import ServiceError, SyncFailed, SyncTimeout, Unreachable
from deltasieve.records import Sync, View

#: Seconds to wait for the service to accept a connection: a service that is up answers at once.
CONNECT_TIMEOUT_S = 5.0
#: Seconds without a byte of an answer before giving up (a view's rows stream as they are read).
READ_TIMEOUT_S = 120.0
#: Seconds between two reads of a sync's record while waiting for its end.
POLL_S = 1.0


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

    def __init__(self, url: str, api_key: str | None = None, *, timeout_s: float = READ_TIMEOUT_S):
        self.url = url.rstrip("/")
        headers = {"X-API-Key": api_key} if api_key else {}
        timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the API's resources, typed --

    def views(self) -> list[View]:
        """Every view the key may see."""
        return [View.from_json(v) for v in self.get("/v1/views")]

    def view(self, name: str) -> View:
        return View.from_json(self.get(f"/v1/views/{name}"))

    def syncs(self, view: str) -> list[Sync]:
        """The view's syncs, newest first (as many as the service keeps: SERVICE_KEEP_DELTAS)."""
        return [Sync.from_json(s) for s in self.get(f"/v1/views/{view}/syncs")]

    def sync_record(self, view: str, sync_id: str) -> Sync:
        return Sync.from_json(self.get(f"/v1/views/{view}/syncs/{sync_id}"))

    def sync(
        self,
        view: str,
        *,
        wait: bool = True,
        verify: bool = False,
        timeout_s: float | None = None,
        poll_s: float = POLL_S,
    ) -> Sync:
        """Start a sync of `view` and, with `wait`, follow it to its end: its finished record,
        SyncFailed if it failed, SyncTimeout after `timeout_s` (the sync goes on). A sync of the
        view already queued or running is the service's 409 (ServiceError). `verify`: also
        compare every row with the source (?mode=verify)."""
        started = self.post(f"/v1/views/{view}/syncs", None, **({"mode": "verify"} if verify else {}))
        if not wait:
            return self.sync_record(view, started["id"])
        return self.wait(view, started["id"], timeout_s=timeout_s, poll_s=poll_s)

    def wait(self, view: str, sync_id: str, *, timeout_s: float | None = None, poll_s: float = POLL_S) -> Sync:
        """Follow a sync's record until it ends: the finished record, or SyncFailed, or SyncTimeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            sync = self.sync_record(view, sync_id)
            if sync.status == "failed":
                raise SyncFailed(sync)
            if sync.finished:
                return sync
            if deadline is not None and time.monotonic() >= deadline:
                raise SyncTimeout(sync, timeout_s or 0.0)
            time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))

    def cancel(self, view: str, sync_id: str) -> Sync:
        """Cancel a queued or running sync (it ends failed, error_code cancelled); its record as it is now."""
        return Sync.from_json(self.request("DELETE", f"/v1/views/{view}/syncs/{sync_id}").json())

    # -- the calls underneath, for what the typed methods do not cover --

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            response.read()
            try:
                detail = describe_detail(response.json())
            except ValueError:
                detail = response.text.strip() or response.reason_phrase
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
