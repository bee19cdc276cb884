"""Where a view is published after its syncs (#37): the interface every destination implements."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import pyarrow as pa

from protocol.types import Column


class CannotFollow(Exception):
    """The delta's columns differ from the destination's in a way it cannot take in place: rebuild it."""


class Destination(Protocol):
    kind: str

    def describe(self) -> dict: ...
    def applied(self) -> str | None: ...
    def rebuild(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        rows: Iterable[pa.RecordBatch],
        multiset: bool,
        reason: str,
    ) -> None: ...
    def apply(
        self,
        sync_id: str,
        version: int,
        columns: list[Column],
        key: list[str],
        delta: Iterable[pa.RecordBatch],
        multiset: bool,
    ) -> None: ...
