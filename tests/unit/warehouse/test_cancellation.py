"""A stop request ends an agent call blocked on an agent that does not answer, at once."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from warehouse.agent_client import AgentClient
from warehouse.cancellation import Cancellation
from warehouse.errors import Cancelled


@pytest.fixture
def silent_agent():
    """A TCP server that takes requests and never answers them (an agent deep in a scan)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", held
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("call", ["exchange", "schema"])
def test_a_stop_request_ends_a_blocked_agent_call(silent_agent, call):
    url, held = silent_agent
    stop = Cancellation()
    client = AgentClient(url, read_timeout_s=60, cancellation=stop)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            if call == "exchange":
                list(client.exchange("/v1/extract", iter([b"frames"])))
            else:
                client.schema()
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 10
    while not held:  # the call reached the agent
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.2)
    t0 = time.monotonic()
    assert stop.request()
    worker.join(10)
    assert not worker.is_alive(), "the call did not end"
    assert time.monotonic() - t0 < 5
    assert len(outcome) == 1 and isinstance(outcome[0], Cancelled), outcome
    client.close()
