"""The compiled kernels both ways: the tests that take `kernels` run with each."""

from __future__ import annotations

import os

import pytest

from deltasieve_protocol import compiled


@pytest.fixture(scope="module", params=["aot", "jit"])
def kernels(request):
    """`aot`: the extension built ahead of time, which the agent and the executors load (the
    suite builds it at start when stale; `aot` fails rather than fall back); `jit`: numba's
    compilation of the same source, the fall-back of a process without a current build.
    Module-scoped, so that hypothesis's tests may take it."""
    previous = os.environ.get(compiled.CHOICE_VARIABLE)
    os.environ[compiled.CHOICE_VARIABLE] = request.param
    try:
        yield request.param
    finally:
        if previous is None:
            del os.environ[compiled.CHOICE_VARIABLE]
        else:
            os.environ[compiled.CHOICE_VARIABLE] = previous
