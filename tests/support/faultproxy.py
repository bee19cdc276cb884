"""A TCP proxy between the service and an agent that misbehaves on purpose.

Each accepted connection takes the next fault of the plan (then `PASS` once the plan is
used up) and applies it to the agent's answer, the direction that carries bulk data:

    PASS               forward both ways untouched
    Truncate(n)        forward n bytes of the answer, then cut both sockets
    Corrupt(n)         flip one byte of the answer at offset n (headers count), forward the rest
    Stall(n)           forward n bytes of the answer, then hold the rest until `release()`
    Slow(bps)          forward the answer at about bps bytes per second
    REFUSE             close the connection at once

`on_connect(n, action)` runs `action()` when the n-th next connection arrives, before it is
forwarded: a way to change the source between two calls of one sync. `hold()` and `cut()`
(the relay's) stop every answer where it is, then end it there: a link cut at a moment the
test picks.

The agent and the service are real processes; only the bytes between them are tampered
with, as a bad link or a broken agent would.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from workloads.relay import Relay, close_socket


@dataclass(frozen=True)
class Fault:
    kind: str
    at: int = 0
    rate: float = 0.0


PASS = Fault("pass")
REFUSE = Fault("refuse")


def Truncate(after: int) -> Fault:
    return Fault("truncate", at=after)


def Corrupt(at: int) -> Fault:
    return Fault("corrupt", at=at)


def Stall(after: int) -> Fault:
    return Fault("stall", at=after)


def Slow(bytes_per_s: float) -> Fault:
    return Fault("slow", rate=bytes_per_s)


@dataclass
class _Leg:
    """One direction of one connection: its fault and the bytes it has forwarded."""

    fault: Fault
    answer: bool
    sent: int = 0


class FaultProxy(Relay):
    def __init__(self, target_host: str, target_port: int):
        self._plan: list[Fault] = []
        self._released = threading.Event()
        self.connections = 0
        self._hook: tuple[int, object] | None = None
        self.answer_bytes = 0  # forwarded from the agent, all connections
        super().__init__(target_host, target_port)

    def plan(self, *faults: Fault) -> None:
        """The faults of the next connections, in order (then PASS)."""
        with self._lock:
            self._plan = list(faults)
            self._released.clear()

    def on_connect(self, nth: int | None, action) -> None:
        """Call `action()` when the nth connection from now arrives, before it reaches the agent."""
        with self._lock:
            self._hook = (self.connections + nth, action) if nth else None

    def release(self) -> None:
        """Let stalled answers go on."""
        self._released.set()

    def close(self) -> None:
        self._closing = True
        self._released.set()
        super().close()

    # -- forwarding --------------------------------------------------------------------
    def _open(self) -> tuple[_Leg, _Leg] | None:
        with self._lock:
            fault = self._plan.pop(0) if self._plan else PASS
            self.connections += 1
            hook = self._hook if self._hook and self._hook[0] == self.connections else None
        if hook:
            hook[1]()
        if fault.kind == "refuse":
            return None
        return _Leg(PASS, answer=False), _Leg(fault, answer=True)

    def _forward(self, data: bytes, sink: socket.socket, leg: _Leg, to_target: bool) -> bool:
        fault = leg.fault
        if fault.kind in ("truncate", "stall") and leg.sent + len(data) >= fault.at:
            head = data[: max(0, fault.at - leg.sent)]
            self._send(sink, head, leg)
            if fault.kind == "truncate":
                return False
            self._released.wait()
            if self._closing:
                return False
            data = data[len(head) :]
            leg.fault = fault = PASS
        if fault.kind == "corrupt" and leg.sent <= fault.at < leg.sent + len(data):
            damaged = bytearray(data)
            damaged[fault.at - leg.sent] ^= 0xFF
            data = bytes(damaged)
        if fault.kind == "slow":
            step = max(1, int(fault.rate / 4))  # a few pieces a second: never idle long
            for i in range(0, len(data), step):
                piece = data[i : i + step]
                self._send(sink, piece, leg)
                time.sleep(len(piece) / fault.rate)
        else:
            self._send(sink, data, leg)
        return True

    def _send(self, sink: socket.socket, data: bytes, leg: _Leg) -> None:
        sink.sendall(data)
        leg.sent += len(data)
        if leg.answer:
            self.answer_bytes += len(data)

    def _finish(self, source: socket.socket, sink: socket.socket) -> None:
        # a fault cuts the whole connection, and a finished one is not kept half open
        close_socket(source)
        close_socket(sink)
