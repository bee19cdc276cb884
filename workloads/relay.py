"""A TCP relay on 127.0.0.1: the skeleton of the test and benchmark proxies.

Each accepted connection is joined to a new connection to the target, with one thread per
direction. Subclasses decide, per connection, whether to take it (`_open`) and what to do
with every chunk that crosses (`_forward`); the relay owns the sockets and closes them all
on `close()`. `hold()` stops every answer (the target's direction) where it is, and `cut()`
then ends the held ones without forwarding more: a link cut at a moment the caller picks,
e.g. while the target is killed and started again.
"""

from __future__ import annotations

import socket
import threading

#: Bytes read from a socket at once: a few TCP segments.
CHUNK_BYTES = 64 * 1024
#: Seconds to reach the target before a connection is given up.
CONNECT_TIMEOUT_S = 10


class Relay:
    """Listens on a free port of 127.0.0.1 and relays every connection to `target`."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self._lock = threading.Lock()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._hold: threading.Event | None = None  # set by `cut()`
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def hold(self) -> None:
        """Forward nothing more of any answer (what was forwarded stays so) until `cut()`."""
        with self._lock:
            self._hold = threading.Event()

    def cut(self) -> None:
        """End the answers `hold()` held, forwarding nothing more of them; new connections pass."""
        with self._lock:
            held, self._hold = self._hold, None
        if held is not None:
            held.set()

    def close(self) -> None:
        self._closing = True
        self.cut()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                close_socket(s)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what subclasses decide ------------------------------------------------------------
    def _open(self) -> tuple[object, object] | None:
        """A new connection: the state of its two legs (to the target, back from it), or None to refuse it."""
        return None, None

    def _forward(self, data: bytes, sink: socket.socket, leg: object, to_target: bool) -> bool:
        """Pass `data` on to `sink`; False cuts the connection."""
        sink.sendall(data)
        return True

    def _finish(self, source: socket.socket, sink: socket.socket) -> None:
        """One direction ended: pass the end of the stream on, so the other side sees it too."""
        for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass

    # -- the relay -------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            legs = self._open()
            if legs is None:
                close_socket(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                close_socket(client)
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink, leg, to_target in ((client, upstream, legs[0], True), (upstream, client, legs[1], False)):
                threading.Thread(target=self._pump, args=(source, sink, leg, to_target), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, leg: object, to_target: bool) -> None:
        cut = False
        try:
            while data := source.recv(CHUNK_BYTES):
                if not to_target and (cut := self._held()):
                    break
                if not self._forward(data, sink, leg, to_target):
                    break
        except OSError:
            pass
        finally:
            if not to_target and not cut:
                cut = self._held()  # an answer that ends while held (its sender killed) ends at the cut
            if cut:
                close_socket(source)
                close_socket(sink)
            else:
                self._finish(source, sink)

    def _held(self) -> bool:
        """Wait out a hold, if one is on; whether there was one."""
        held = self._hold
        if held is None:
            return False
        held.wait()
        return True


def close_socket(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
