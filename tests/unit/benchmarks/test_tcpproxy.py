"""The benchmark's byte-counting proxy counts every byte both ways, and the request turns."""

from __future__ import annotations

import socket
import threading

from tests.benchmarks.tcpproxy import ByteCountingProxy

SIZES = (10, 1000, 100_000)


def _echo_server() -> socket.socket:
    """Reads each whole request of SIZES, then answers it doubled: one turn per request."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        with conn:
            for size in SIZES:
                conn.sendall(_read(conn, size) * 2)

    threading.Thread(target=serve, daemon=True).start()
    return server


def _read(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, "connection closed early"
        got += chunk
    return got


def test_proxy_relays_and_counts_both_directions_and_turns():
    server = _echo_server()
    with ByteCountingProxy(*server.getsockname()[:2]) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as client:
            for size in SIZES:
                client.sendall(b"x" * size)
                assert _read(client, 2 * size) == b"x" * (2 * size)
        sent = sum(SIZES)
        traffic = proxy.traffic()
        assert (traffic.to_server, traffic.from_server) == (sent, 2 * sent)
        assert traffic.round_trips == 3 and traffic.connections == 1
    server.close()
