"""Waiting in tests for what a service does in the background."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(what: str, check: Callable[[], T], within_s: float, every_s: float = 0.3) -> T:
    """Poll `check` until it returns something true, and return that; fail naming `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"after {within_s} s still not: {what}")
        time.sleep(every_s)
    return result
