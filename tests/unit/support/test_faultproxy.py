"""The fault proxy of the agent-failure tests does to each connection what its plan says."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.support.faultproxy import PASS, REFUSE, Corrupt, FaultProxy, Stall, Truncate

ANSWER = bytes(range(256)) * 40  # 10 KiB, every byte value


@pytest.fixture
def server():
    """Answers each connection's one-byte request with ANSWER, then closes it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                if conn.recv(1):
                    conn.sendall(ANSWER)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[:2]
    listener.close()


def _ask(proxy: FaultProxy, timeout: float = 10) -> bytes:
    with socket.create_connection((proxy.host, proxy.port), timeout=timeout) as s:
        try:
            s.sendall(b"?")
        except OSError:
            return b""
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        return got


def test_the_plan_applies_to_the_next_connections_in_order_then_everything_passes(server):
    with FaultProxy(*server) as proxy:
        proxy.plan(Truncate(100), Corrupt(5), REFUSE, PASS)
        assert _ask(proxy) == ANSWER[:100]
        damaged = _ask(proxy)
        assert len(damaged) == len(ANSWER) and damaged[5] == ANSWER[5] ^ 0xFF
        assert damaged[:5] + damaged[6:] == ANSWER[:5] + ANSWER[6:]
        assert _ask(proxy) == b""
        assert _ask(proxy) == ANSWER
        assert _ask(proxy) == ANSWER  # the plan is used up
        assert proxy.connections == 5
        assert proxy.answer_bytes == 100 + 3 * len(ANSWER)


def test_a_stalled_answer_holds_until_released(server):
    with FaultProxy(*server) as proxy:
        proxy.plan(Stall(1000))
        with socket.create_connection((proxy.host, proxy.port), timeout=10) as s:
            s.sendall(b"?")
            got = b""
            while len(got) < 1000:
                got += s.recv(65536)
            s.settimeout(0.3)
            with pytest.raises(TimeoutError):
                s.recv(65536)
            proxy.release()
            s.settimeout(10)
            while chunk := s.recv(65536):
                got += chunk
        assert got == ANSWER


def test_on_connect_runs_before_the_nth_connection_is_forwarded(server):
    seen = []
    with FaultProxy(*server) as proxy:
        proxy.on_connect(2, lambda: seen.append(proxy.connections))
        _ask(proxy)
        assert seen == []
        _ask(proxy)
        assert seen == [2]
        _ask(proxy)
        assert seen == [2]
