"""A TCP proxy that counts the bytes crossing it, both ways, for every connection.

Put between a client and a database server, it measures what the client's protocol costs
on the wire (handshake, authentication, queries and results), as the agent's sockets are
measured for the service's strategies.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

#: Bytes read from a socket at once: a few TCP segments.
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Traffic:
    """What crossed the proxy: client -> server, server -> client, and request turns."""

    to_server: int
    from_server: int
    #: Times a client spoke after the server had (or first on its connection): one turn of
    #: request and answer; concurrent connections' turns overlap in time.
    round_trips: int
    connections: int


class ByteCountingProxy:
    """Listens on 127.0.0.1 (a free port) and relays every connection to `target`."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = self._server.getsockname()[:2]
        self._lock = threading.Lock()
        self._to_server = self._from_server = self._turns = self._connections = 0
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def traffic(self) -> Traffic:
        with self._lock:
            return Traffic(self._to_server, self._from_server, self._turns, self._connections)

    def since(self, before: Traffic) -> Traffic:
        now = self.traffic()
        return Traffic(now.to_server - before.to_server, now.from_server - before.from_server, now.round_trips - before.round_trips, now.connections - before.connections)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass

    def __enter__(self) -> "ByteCountingProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state = {"last": "server"}  # the client's first bytes open a turn
            with self._lock:
                self._connections += 1
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True, state), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, state), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_server: bool, state: dict) -> None:
        try:
            while data := source.recv(CHUNK_BYTES):
                with self._lock:
                    if to_server:
                        self._to_server += len(data)
                        if state["last"] == "server":
                            self._turns += 1
                        state["last"] = "client"
                    else:
                        self._from_server += len(data)
                        state["last"] = "server"
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # Pass the end of the stream on, so the other side sees the close too.
            for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
                try:
                    s.shutdown(how)
                except OSError:
                    pass
