"""The wiretap of the policy tests reads back what crossed: keep-alive exchanges, chunked
frame streams and JSON, as the two ends decode them."""

from __future__ import annotations

import doctest
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pyarrow as pa
import pytest

from deltasieve_protocol import frames
from tests.support import wiretap
from tests.support.wiretap import Wiretap, carried_strings

ASKED = frames.json_frame(frames.CONTROL, {"site": "asked"})
STREAM = frames.json_frame(frames.CONTROL, {"note": "control"}) + frames.arrow_frame(
    frames.ROWS, pa.record_batch({"id": [1, 2], "email": ["ann@example.com", None]})
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", frames.MEDIA_TYPE)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(STREAM), 7):  # many small chunks
            piece = STREAM[i : i + 7]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        body = b'{"tables": ["people"]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def tap():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with Wiretap("127.0.0.1", server.server_address[1]) as tap:
        yield tap
    server.shutdown()


def test_exchanges_on_one_kept_alive_connection_are_read_back_decoded(tap):
    with httpx.Client(base_url=tap.url) as client:
        assert client.get("/v1/tables").status_code == 200
        r = client.post("/v1/extract", content=ASKED, headers={"Content-Type": frames.MEDIA_TYPE})
        assert r.content == STREAM
    assert len(tap.connections) == 1
    got = tap.exchanges()
    assert [(e.method, e.target, e.status) for e in got] == [("GET", "/v1/tables", 200), ("POST", "/v1/extract", 200)]
    assert got[1].request_body == ASKED and got[1].answer_body == STREAM
    strings = carried_strings(got)
    # the e-mail travels zstd-compressed: only decoding finds it
    assert b"ann@example.com" not in bytes(tap.connections[0][1])
    assert {"ann@example.com", "asked", "control", "people", "tables"} <= strings
    asked, answered = tap.bytes_each_way()
    assert asked == len(tap.connections[0][0]) and answered > len(STREAM)


def test_the_module_examples_hold():
    assert doctest.testmod(wiretap).failed == 0
