"""Fixtures of the unit tests of more than one package."""

from __future__ import annotations

import hmac

import pytest


@pytest.fixture
def compare_calls(monkeypatch):
    """Record the arguments of every hmac.compare_digest call (the real one still decides)."""
    calls = []
    real = hmac.compare_digest

    def recording(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    return calls
