"""The process series of /metrics (service/resources.py): read from this process's /proc."""

from __future__ import annotations

import socket
import threading

from service import resources
from service.metrics import ServiceMetrics


def series(name: str) -> float:
    for line in ServiceMetrics().exposition().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}")


def test_a_thread_more_shows():
    before = series("deltasieve_process_threads")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert series("deltasieve_process_threads") == before + 1
    finally:
        stop.set()
        thread.join()


def test_a_connection_shows_accepted_on_one_end_and_opened_on_the_other():
    before = resources.usage()
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        try:
            now = resources.usage()
            assert (now.connections_in, now.connections_out) == (before.connections_in + 1, before.connections_out + 1)
            assert now.open_files == before.open_files + 3  # the listener and both ends
            assert server.getsockname()[1] in resources.peers("self")
            assert series('deltasieve_process_tcp_connections{direction="opened"}') == now.connections_out
        finally:
            client.close()
            accepted.close()
    assert resources.usage().connections_out == before.connections_out


def test_memory_is_shown():
    assert series("deltasieve_process_resident_memory_bytes") > 10 * 2**20
    now = resources.usage()
    assert now.tree_rss_bytes >= now.rss_bytes
