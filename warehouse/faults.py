"""Test-only fault injection: end the process abruptly at a named point of a sync.

Set `DELTASIEVE_KILL_AT` to one of `POINTS` in the service's environment and the process
kills itself with SIGKILL the first time a sync reaches that point, as a power cut or an
out-of-memory kill would. The crash tests use it to prove that a sync is atomic; in normal
operation the variable is unset and a checkpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

KILL_AT_ENV = "DELTASIEVE_KILL_AT"

#: Where a sync can be cut, in the order a sync reaches them.
POINTS = (
    "exchange_units",  # the agent's answer is streaming in
    "fragments_written",  # the new fragments and statistics are staged
    "delta_written",  # the view's delta is staged too
    "before_visible",  # the version is moved into place; CURRENT still names the old one
    "after_visible",  # CURRENT names the new version; the catalog has not heard yet
)


def checkpoint(point: str) -> None:
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
