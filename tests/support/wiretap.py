"""A TCP relay between the service and an agent that keeps every byte that crosses, and
reads them back as HTTP exchanges and the values their bodies carry.

The service is pointed at the tap's URL instead of the agent's; nothing is changed on the
way. `exchanges()` parses the recorded bytes of each connection as HTTP/1.1 (keep-alive,
chunked bodies and all) with h11, the parser httpx itself uses, and `carried_strings()`
decodes the bodies as the two ends do: frame streams (zstd-compressed Arrow batches and
JSON control frames) and JSON. What a test finds there is what crossed the link.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import h11

from deltasieve_protocol import frames
from workloads.relay import Relay


@dataclass(frozen=True)
class Exchange:
    """One request and its answer, bodies de-chunked."""

    method: str
    target: str
    request_type: str
    request_body: bytes
    status: int
    answer_type: str
    answer_body: bytes


class Wiretap(Relay):
    """Relays every connection to `target` untouched and keeps both directions' bytes."""

    def __init__(self, target_host: str, target_port: int):
        #: Per connection: the bytes sent to the target, and the bytes it answered.
        self.connections: list[tuple[bytearray, bytearray]] = []
        super().__init__(target_host, target_port)

    def _open(self) -> tuple[bytearray, bytearray]:
        legs = (bytearray(), bytearray())
        with self._lock:
            self.connections.append(legs)
        return legs

    def _forward(self, data: bytes, sink: socket.socket, leg: bytearray, to_target: bool) -> bool:
        leg.extend(data)
        sink.sendall(data)
        return True

    def bytes_each_way(self) -> tuple[int, int]:
        """Bytes sent to the target and bytes answered, over every connection so far."""
        return sum(len(a) for a, _ in self.connections), sum(len(b) for _, b in self.connections)

    def exchanges(self, since: int = 0) -> list[Exchange]:
        """Every complete exchange of the connections opened from the `since`-th on."""
        return [
            ex for asked, answered in self.connections[since:] for ex in http_exchanges(bytes(asked), bytes(answered))
        ]


def http_exchanges(asked: bytes, answered: bytes) -> list[Exchange]:
    """The exchanges one connection's two byte streams hold, in order; an unfinished last
    one is left out.

    >>> asked = b"POST /v1/x HTTP/1.1\\r\\nHost: a\\r\\nContent-Length: 2\\r\\n\\r\\nhi"
    >>> answered = b"HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n3\\r\\nyes\\r\\n0\\r\\n\\r\\n"
    >>> [(e.method, e.target, e.request_body, e.status, e.answer_body) for e in http_exchanges(asked, answered)]
    [('POST', '/v1/x', b'hi', 200, b'yes')]
    """
    server, client = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
    server.receive_data(asked)
    client.receive_data(answered)
    out: list[Exchange] = []
    while True:
        request, body = _message(server, h11.Request)
        if request is None:
            return out
        # the client side must have sent the request before it may read the answer
        client.send(h11.Request(method=request.method, target=request.target, headers=request.headers))
        client.send(h11.Data(data=body))
        client.send(h11.EndOfMessage())
        answer, answer_body = _message(client, h11.Response)
        if answer is None:
            return out
        out.append(
            Exchange(
                request.method.decode(),
                request.target.decode(),
                _content_type(request.headers),
                body,
                answer.status_code,
                _content_type(answer.headers),
                answer_body,
            )
        )
        # the server side sends the same answer back, so that both sides may start the next cycle
        server.send(h11.Response(status_code=answer.status_code, headers=answer.headers, reason=answer.reason))
        server.send(h11.Data(data=answer_body))
        server.send(h11.EndOfMessage())
        if server.our_state is not h11.DONE or client.our_state is not h11.DONE:
            return out
        try:
            server.start_next_cycle()
            client.start_next_cycle()
        except h11.LocalProtocolError:  # the connection was not kept alive
            return out


def _message(conn: h11.Connection, head_type: type) -> tuple[object | None, bytes]:
    head, body = None, bytearray()
    while True:
        event = conn.next_event()
        if event in (h11.NEED_DATA, h11.PAUSED) or isinstance(event, h11.ConnectionClosed):
            return None, b""
        if isinstance(event, head_type):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return head, bytes(body)


def _content_type(headers: Iterable[tuple[bytes, bytes]]) -> str:
    return next((v.decode() for k, v in headers if k.lower() == b"content-type"), "")


def carried_strings(exchanges: Iterable[Exchange]) -> set[str]:
    """Every string value the bodies carry, decoded as the receiving end decodes them:
    column values of every Arrow frame, every string in JSON frames and JSON bodies, and
    the text of any other body."""
    found: set[str] = set()
    for ex in exchanges:
        for kind, body in ((ex.request_type, ex.request_body), (ex.answer_type, ex.answer_body)):
            found |= set(_strings_in(kind, body))
    return found


def _strings_in(content_type: str, body: bytes) -> Iterator[str]:
    if not body:
        return
    if content_type.startswith(frames.MEDIA_TYPE):
        for frame in frames.read_frames([body]):
            if frame.kind in frames.RAW_KINDS:
                continue
            if frame.kind in (frames.CONTROL, frames.SUMMARY, frames.ERROR):
                yield from _json_strings(frame.json())
            else:
                for column in frame.batch().to_pydict().values():
                    yield from (v for v in column if isinstance(v, str))
    elif content_type.startswith("application/json"):
        yield from _json_strings(json.loads(body))
    else:
        yield body.decode(errors="replace")


def _json_strings(value: object) -> Iterator[str]:
    """
    >>> sorted(_json_strings({"a": ["x", 1, {"b": "y"}], "c": None}))
    ['a', 'b', 'c', 'x', 'y']
    """
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)
