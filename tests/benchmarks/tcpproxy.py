"""A TCP proxy that counts the bytes crossing it, both ways, for every connection.

Put between a client and a database server, it measures what the client's protocol costs
on the wire (handshake, authentication, queries and results), as the agent's sockets are
measured for the service's strategies.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from workloads.relay import Relay


@dataclass(frozen=True)
class Traffic:
    """What crossed the proxy: client -> server, server -> client, and request turns."""

    to_server: int
    from_server: int
    #: Times a client spoke after the server had (or first on its connection): one turn of
    #: request and answer; concurrent connections' turns overlap in time.
    round_trips: int
    connections: int


class ByteCountingProxy(Relay):
    """Listens on 127.0.0.1 (a free port) and relays every connection to `target`, counting."""

    def __init__(self, target_host: str, target_port: int):
        self._to_server = self._from_server = self._turns = self._connections = 0
        super().__init__(target_host, target_port)

    def traffic(self) -> Traffic:
        with self._lock:
            return Traffic(self._to_server, self._from_server, self._turns, self._connections)

    def since(self, before: Traffic) -> Traffic:
        now = self.traffic()
        return Traffic(
            now.to_server - before.to_server,
            now.from_server - before.from_server,
            now.round_trips - before.round_trips,
            now.connections - before.connections,
        )

    def _open(self) -> tuple[dict, dict]:
        with self._lock:
            self._connections += 1
        turn = {"last": "server"}  # shared by both legs; the client's first bytes open a turn
        return turn, turn

    def _forward(self, data: bytes, sink: socket.socket, turn: dict, to_target: bool) -> bool:
        with self._lock:
            if to_target:
                self._to_server += len(data)
                if turn["last"] == "server":
                    self._turns += 1
                turn["last"] = "client"
            else:
                self._from_server += len(data)
                turn["last"] = "server"
        sink.sendall(data)
        return True
