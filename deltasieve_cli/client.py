"""The command's client of the service: deltasieve.client's, its errors turned into the
command's (each with its exit status, deltasieve_cli/errors.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from deltasieve import client, errors
from deltasieve_cli.errors import ServiceError, Unreachable

__all__ = ["Client"]


class Client(client.Client):
    """The service at `url`; `api_key` is sent as X-API-Key on every call. Errors are CliErrors."""

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            return super().request(method, path, **kwargs)
        except errors.DeltasieveError as exc:
            raise _cli_error(exc) from None

    @contextmanager
    def stream(self, path: str, **params) -> Iterator[tuple[Iterator[str], httpx.Headers]]:
        try:
            with super().stream(path, **params) as answer:
                yield answer
        except errors.DeltasieveError as exc:
            raise _cli_error(exc) from None


def _cli_error(exc: errors.DeltasieveError) -> Exception:
    """The command's error for a client error: its message and exit status."""
    if isinstance(exc, errors.ServiceError):
        detail = exc.detail
        if exc.status == 401:
            detail += " (give a key of the service with --api-key or DELTASIEVE_API_KEY)"
        return ServiceError(exc.status, detail, exc.method, exc.path)
    if isinstance(exc, errors.Unreachable):
        return Unreachable(exc.url, exc.reason)
    return exc
