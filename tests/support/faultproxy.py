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
forwarded: a way to change the source between two calls of one sync.

The agent and the service are real processes; only the bytes between them are tampered
with, as a bad link or a broken agent would.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass


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


class FaultProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._plan: list[Fault] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self.connections = 0
        self._hook: tuple[int, object] | None = None
        self.answer_bytes = 0  # forwarded from the agent, all connections
        threading.Thread(target=self._accept, daemon=True).start()

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
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                _close(s)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- forwarding --------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                fault = self._plan.pop(0) if self._plan else PASS
                self.connections += 1
                hook = self._hook if self._hook and self._hook[0] == self.connections else None
            if hook:
                hook[1]()
            if fault.kind == "refuse":
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, PASS, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, fault, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, fault: Fault, answer: bool) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if fault.kind in ("truncate", "stall") and sent + len(data) >= fault.at:
                    head = data[: max(0, fault.at - sent)]
                    dst.sendall(head)
                    sent += len(head)
                    if answer:
                        self.answer_bytes += len(head)
                    if fault.kind == "truncate":
                        break
                    self._released.wait()
                    if self._closing:
                        break
                    data = data[len(head):]
                    fault = PASS
                if fault.kind == "corrupt" and sent <= fault.at < sent + len(data):
                    damaged = bytearray(data)
                    damaged[fault.at - sent] ^= 0xFF
                    data = bytes(damaged)
                if fault.kind == "slow":
                    step = max(1, int(fault.rate / 4))  # a few pieces a second: never idle long
                    for i in range(0, len(data), step):
                        piece = data[i:i + step]
                        dst.sendall(piece)
                        time.sleep(len(piece) / fault.rate)
                else:
                    dst.sendall(data)
                sent += len(data)
                if answer:
                    self.answer_bytes += len(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
