"""The agent's counters, shown by GET /metrics in Prometheus' text format.

Written here rather than with prometheus_client, which is the service's dependency: the
agent installs without it, and a few counters by route need no more than this. The counts
live in the process and start again at 0 when the agent does, as Prometheus expects of a
counter.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

#: The classic text format, as every Prometheus version reads it (the service's metrics use it too).
MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"

ABANDONED = "deltasieve_agent_requests_abandoned_total"
ABANDONED_HELP = (
    "Requests whose client closed the connection before the agent had read their body "
    "(a warehouse cancelling or stopping a sync), by route; ended without an answer"
)


class AgentMetrics:
    """Counts of what the agent met, by route; thread-safe.

    >>> m = AgentMetrics()
    >>> m.expect(["/v1/extract"]); m.abandoned("/v1/sketch")
    >>> print(m.exposition(), end="")  # doctest: +ELLIPSIS
    # HELP deltasieve_agent_requests_abandoned_total Requests whose client ...
    # TYPE deltasieve_agent_requests_abandoned_total counter
    deltasieve_agent_requests_abandoned_total{route="/v1/extract"} 0
    deltasieve_agent_requests_abandoned_total{route="/v1/sketch"} 1
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned: Counter[str] = Counter()

    def expect(self, routes: Iterable[str]) -> None:
        """Show the series of these routes from the start, at 0: the first count of a series
        that appears only with it is lost to rate() and increase()."""
        with self._lock:
            for route in routes:
                self._abandoned.setdefault(route, 0)

    def abandoned(self, route: str) -> None:
        """Count a request of `route` whose client left before its body was read."""
        with self._lock:
            self._abandoned[route] += 1

    def exposition(self) -> str:
        """The counters in Prometheus' text format."""
        with self._lock:
            counts = sorted(self._abandoned.items())
        lines = [f"# HELP {ABANDONED} {ABANDONED_HELP}", f"# TYPE {ABANDONED} counter"]
        lines += [f'{ABANDONED}{{route="{_label(route)}"}} {count}' for route, count in counts]
        return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    """A label value escaped as the text format asks.

    >>> print(_label('say "hi"'))
    say \\"hi\\"
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
