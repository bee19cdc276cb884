"""An HTTP proxy in front of the S3 server that fails the commits of Delta tables on purpose.

delta-rs writes a table's data files first, then commits them with one PUT of
`_delta_log/<version>.json` (warehouse/destinations/object_storage.py). The proxy forwards
every request to the server untouched, except the commit PUTs while a fault is planned:

    REFUSE   answer 500 (InternalError) without forwarding: the commit never lands
    LOSE     forward it (the server stores the commit), then drop the connection without
             an answer: the commit landed and the writer cannot know it

`fail_commits(fault, times)` plans the fault for the next `times` commit PUTs (None: every
one until `heal()`); `commits()` lists (fault or "pass", path) for each commit PUT seen. Only
the bytes between delta-rs and a real server are tampered with, as a bad link or a server
in trouble would.

The proxy is a process of its own (`python -m tests.support.s3_faults TARGET`, told what to
do through `/__faults__` on its own port): deltalake holds the GIL through some of its
calls (a table's history), so a proxy thread in the test's process would wait on the very
call it serves.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

#: The proxy's own path: POST ?fault=F[&times=N] plans, DELETE heals, GET lists the commits seen.
CONTROL = "/__faults__"
REFUSE = "refuse"
LOSE = "lose"
#: The path of a Delta commit: the table's `_delta_log/` and a 20-digit version.
COMMIT = re.compile(r"/_delta_log/\d{20}\.json(\?|$)")
#: Headers that belong to one hop of a connection, not to the request or the answer.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
INTERNAL_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)


class CommitFaults:
    """The proxy, a process on a free loopback port: `endpoint` is its http://127.0.0.1:PORT."""

    def __init__(self, target: str):
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.s3_faults", target],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self._process.stdout is not None
        self.endpoint = self._process.stdout.readline().decode().strip()
        if not self.endpoint.startswith("http://"):
            self.close()
            raise RuntimeError("the S3 fault proxy did not start")

    def fail_commits(self, fault: str, times: int | None = None) -> None:
        """Fail the next `times` commit PUTs with `fault` (None: all of them until heal())."""
        params = {"fault": fault, **({"times": str(times)} if times is not None else {})}
        httpx.post(f"{self.endpoint}{CONTROL}", params=params).raise_for_status()

    def heal(self) -> None:
        httpx.delete(f"{self.endpoint}{CONTROL}").raise_for_status()

    def commits(self) -> list[tuple[str, str]]:
        """(fault or "pass", path) of each commit PUT the proxy has seen, in order."""
        return [tuple(c) for c in httpx.get(f"{self.endpoint}{CONTROL}").json()]

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


class _Proxy:
    """The proxy's state, in its own process: the fault planned, the commits seen."""

    def __init__(self, target: str):
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.commits: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._fault: str | None = None
        self._left: int | None = None

    def plan(self, fault: str | None, times: int | None) -> None:
        with self._lock:
            self._fault, self._left = fault, times

    def _take(self, method: str, path: str) -> str | None:
        """The fault this request gets (None: forwarded untouched), noted when it is a commit."""
        if method != "PUT" or not COMMIT.search(path):
            return None
        with self._lock:
            fault = self._fault
            if fault is not None and self._left is not None:
                self._left -= 1
                if self._left <= 0:
                    self._fault, self._left = None, None
            self.commits.append((fault or "pass", path))
            return fault


def _handler(proxy: _Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # quiet: the server's own log has the requests
            pass

        def _control(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            if self.command == "POST":
                times = query.get("times")
                proxy.plan(query["fault"][0], int(times[0]) if times else None)
            elif self.command == "DELETE":
                proxy.plan(None, None)
            body = json.dumps(proxy.commits).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _relay(self) -> None:
            if self.path.startswith(CONTROL):
                self._control()
                return
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                raise AssertionError("the proxy forwards requests with a Content-Length only")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = proxy._take(self.command, self.path)
            if fault == REFUSE:
                self.send_response(500)
                self.send_header("Connection", "close")
                self.close_connection = True
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(INTERNAL_ERROR)))
                self.end_headers()
                self.wfile.write(INTERNAL_ERROR)
                return
            upstream = http.client.HTTPConnection(*proxy.target, timeout=60)
            try:
                # the Host header is forwarded as signed (SigV4 signs it)
                upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        upstream.putheader(name, value)
                upstream.putheader("Connection", "close")  # one request a connection: the answer ends with it
                upstream.endheaders(body)
                answer = upstream.getresponse()
                data = answer.read()
                headers = answer.getheaders()
            finally:
                upstream.close()
            if fault == LOSE:  # stored by the server; the writer never hears of it
                self.close_connection = True
                return
            self.send_response(answer.status, answer.reason)
            self.send_header("Connection", "close")  # no connection kept: each request finds the proxy anew
            self.close_connection = True
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP | {"server", "date"} and (
                    name.lower() != "content-length" or self.command == "HEAD"
                ):
                    self.send_header(name, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.end_headers()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    return Handler


def main(target: str) -> None:
    """Serve the proxy in front of `target` until ended; its endpoint is the first line printed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(_Proxy(target)))
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
