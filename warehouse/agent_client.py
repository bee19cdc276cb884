"""HTTP client for one source's agent, counting every byte that crosses the link."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import httpcore
import httpx
from pydantic import ValidationError

from deltasieve_protocol import frames
from deltasieve_protocol.error_codes import SOURCE_ERROR
from deltasieve_protocol.models import ColumnSampleOut, ColumnSampleRequest
from deltasieve_protocol.resume import RESUMED_HEADER
from deltasieve_protocol.schema import FINGERPRINT_HEADER
from deltasieve_protocol.siterefs import UNKNOWN_SITE, by_reference, site_ref
from warehouse.cancellation import Cancellation
from warehouse.defaults import DEADLINE_S, READ_TIMEOUT_S
from warehouse.errors import AgentBusy, AgentRejected, AgentUnavailable, Cancelled, ProtocolError, SourceError

#: Seconds to wait for a connection to the agent.
CONNECT_TIMEOUT_S = 10.0


@dataclass
class Call:
    """One request to the agent: its bodies' bytes each way, and all its bytes on the wire
    (HTTP headers and TLS included), so that what a sync moves is told apart from the
    fixed cost of HTTP; and when it ran: `at_s` seconds after the client was made, for
    `seconds` (until its answer was read and handled), `agent_s` of them the agent's own
    answering (its summary's elapsed_s; None when the answer has no summary). What lies
    between one call's end and the next one's start is the caller's own work."""

    call: str  # method and path: "POST /v1/sketch"
    body_to_agent: int = 0
    body_from_agent: int = 0
    to_agent: int = 0
    from_agent: int = 0
    at_s: float = 0.0
    seconds: float = 0.0
    agent_s: float | None = None

    def to_json(self) -> dict:
        out = {
            "call": self.call,
            "body_to_agent": self.body_to_agent,
            "body_from_agent": self.body_from_agent,
            "to_agent": self.to_agent,
            "from_agent": self.from_agent,
            "at_s": self.at_s,
            "seconds": self.seconds,
        }
        if self.agent_s is not None:
            out["agent_s"] = self.agent_s
        return out


@dataclass
class ByteCounter:
    """Bytes written to and read from the agent's sockets, TLS and HTTP headers included,
    and each call's share of them (`calls`, in order)."""

    sent: int = 0
    received: int = 0
    requests: int = 0
    calls: list[Call] = field(default_factory=list)
    #: When the counter (its client) was made: the calls' `at_s` count from it.
    origin: float = field(default_factory=time.monotonic, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, sent: int = 0, received: int = 0) -> None:
        with self._lock:
            self.sent += sent
            self.received += received

    @contextlib.contextmanager
    def call(self, name: str) -> Iterator[Call]:
        """Count one request: its wire bytes are those that crossed while it ran (the calls
        of one client run one after the other); the caller adds its bodies' bytes."""
        t0 = time.monotonic()
        record = Call(name, at_s=round(t0 - self.origin, 3))
        sent, received = self.sent, self.received
        try:
            yield record
        finally:
            record.to_agent, record.from_agent = self.sent - sent, self.received - received
            record.seconds = round(time.monotonic() - t0, 3)
            self.calls.append(record)

    def absorb(self, other: ByteCounter) -> None:
        """Add the bytes, requests and calls of another client's counter (a sibling's) to these."""
        with self._lock:
            self.sent += other.sent
            self.received += other.received
        self.requests += other.requests
        self.calls.extend(other.calls)


class _CountingStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, counter: ByteCounter, live: set | None = None):
        self._inner = inner
        self._counter = counter
        self._live = live if live is not None else set()
        self._live.add(self)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, timeout)
        self._counter.add(received=len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)
        self._counter.add(sent=len(buffer))

    def close(self) -> None:
        self._live.discard(self)
        self._inner.close()

    def shut(self) -> None:
        """End the connection under a read or write blocked on it in another thread (a
        close alone does not wake a blocked read)."""
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        self._live.discard(self)
        return _CountingStream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._counter, self._live)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


class _CountingBackend(httpcore.NetworkBackend):
    def __init__(self, counter: ByteCounter):
        self._inner = httpcore.SyncBackend()
        self._counter = counter
        #: the connections open now, to shut them down on a stop request
        self.live: set[_CountingStream] = set()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _CountingStream(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self._counter, self.live
        )

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _CountingStream(self._inner.connect_unix_socket(path, timeout, socket_options), self._counter, self.live)

    def shut(self) -> None:
        for stream in list(self.live):
            stream.shut()

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


#: TLS set-ups built so far, by `verify` (True, False, or a CA bundle's path with its mtime):
#: loading a CA bundle costs tens of milliseconds of CPU, and a sync makes several clients.
_TLS: dict[tuple[str | bool, float], ssl.SSLContext] = {}
_TLS_LOCK = threading.Lock()


def _tls(verify: ssl.SSLContext | str | bool) -> ssl.SSLContext:
    """httpx's TLS set-up for `verify` (the one HTTPTransport builds: its CA bundle, its
    checks), built once per bundle file version and shared: an SSLContext serves any number
    of connections."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    try:
        key = (verify, os.stat(verify).st_mtime if isinstance(verify, str) else 0.0)
    except OSError:  # httpx says what is wrong with the path
        return httpx.create_ssl_context(verify=verify)
    with _TLS_LOCK:
        if key not in _TLS:
            _TLS[key] = httpx.create_ssl_context(verify=verify)
        return _TLS[key]


def _counting_transport(backend: _CountingBackend, verify: ssl.SSLContext | str | bool) -> httpx.HTTPTransport:
    ssl_context = _tls(verify)
    transport = httpx.HTTPTransport(verify=ssl_context)
    transport._pool = httpcore.ConnectionPool(ssl_context=ssl_context, max_connections=4, network_backend=backend)
    return transport


class AgentClient:
    """Calls to one agent; use as a context manager. `counter` holds the bytes so far."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        verify: ssl.SSLContext | str | bool = True,
        read_timeout_s: float = READ_TIMEOUT_S,
        deadline_s: float = DEADLINE_S,
        cancellation: Cancellation | None = None,
    ):
        self.url = url.rstrip("/")
        try:
            httpx.URL(self.url)
        except httpx.InvalidURL as exc:
            raise AgentRejected(f"the agent URL {url!r} is not a valid URL: {exc}") from None
        if token is not None and not token.isascii():
            raise AgentRejected("the agent token holds characters an HTTP header cannot carry (ASCII only)")
        self.deadline_s = deadline_s
        self._settings = (token, verify, read_timeout_s)
        self.counter = ByteCounter()
        #: The fingerprint of the columns of the tables the last extraction read, as its answer
        #: named it (deltasieve_protocol.schema.FINGERPRINT_HEADER); None from an agent that predates it.
        self.fingerprint: str | None = None
        #: Whether the last exchange's answer reads after the key its request named
        #: (deltasieve_protocol.resume.RESUMED_HEADER); False until its headers came.
        self.resumed = False
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._backend = _CountingBackend(self.counter)
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            transport=_counting_transport(self._backend, verify),
            timeout=httpx.Timeout(CONNECT_TIMEOUT_S, read=read_timeout_s, write=read_timeout_s),
        )
        #: a stop request shuts the connections: a call blocked on the agent ends at once
        self.cancellation = cancellation or Cancellation()
        self.cancellation.on_request(self._backend.shut)

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def sibling(self) -> AgentClient:
        """A client of the same agent, settings and stop request, with a counter of its own:
        for calls that run beside this client's (each counter assumes its calls run one after
        another); its counter is added to this one's with `ByteCounter.absorb`."""
        token, verify, read_timeout_s = self._settings
        return AgentClient(
            self.url,
            token,
            verify=verify,
            read_timeout_s=read_timeout_s,
            deadline_s=self.deadline_s,
            cancellation=self.cancellation,
        )

    @property
    def round_trips(self) -> int:
        return self.counter.requests

    def schema(self, tables: list[str] | None = None) -> dict:
        """The agent's exposed tables, columns, types and keys (only `tables`, if given)."""
        response = self._call("GET", "/v1/schema", params={"table": tables} if tables is not None else None)
        return response.json()

    def column_sample(self, request: ColumnSampleRequest) -> ColumnSampleOut:
        """A bounded sample of one column read as a stronger type (POST /v1/column_sample)."""
        response = self._call("POST", "/v1/column_sample", request.model_dump())
        try:
            return ColumnSampleOut.model_validate(response.json())
        except (ValidationError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"malformed column sample from the agent at {self.url}: {exc}") from None

    def exchange(self, path: str, body: Iterable[bytes]) -> Iterator[frames.Frame]:
        """POST a frame sequence and yield the answer's frames; errors become exceptions.

        The last frame must be a summary: a body that ends without one was cut off. A body
        given as a list, whose control frame names its site in full, names it by reference
        instead once this agent has answered a request carrying that site in full (it can
        then be sent again: an agent that no longer holds the reference answers 409
        unknown_site at once; deltasieve_protocol/siterefs.py).
        """
        control = _site_control(body)
        if control is None:
            yield from self._exchange(path, body)
            return
        assert isinstance(body, list)
        ref = site_ref(control["site"])
        held = (self.url, ref)
        if held in _HELD:
            short = [frames.json_frame(frames.CONTROL, by_reference(control, ref)), *body[1:]]
            try:
                yield from self._exchange(path, short)
                return
            except AgentRejected as exc:
                if exc.agent_code != UNKNOWN_SITE:
                    raise
                _HELD.discard(held)
        yield from self._exchange(path, body, held)

    def _exchange(
        self, path: str, body: Iterable[bytes], held: tuple[str, str] | None = None
    ) -> Iterator[frames.Frame]:
        """exchange's request; `held` is noted in _HELD once the agent has accepted it."""
        self.counter.requests += 1
        self.resumed = False
        try:
            with (
                self.counter.call(f"POST {path}") as call,
                self._http.stream(
                    "POST", path, content=_counted(body, call), headers={"Content-Type": frames.MEDIA_TYPE}
                ) as response,
            ):
                if response.status_code != 200:
                    response.read()
                    raise _rejection(response)
                self.fingerprint = response.headers.get(FINGERPRINT_HEADER, self.fingerprint)
                self.resumed = RESUMED_HEADER in response.headers
                if held is not None:
                    _HELD.add(held)
                finished = False
                for frame in frames.read_frames(self._within_deadline(response.iter_bytes(), path, call)):
                    if finished:
                        raise ProtocolError("the agent sent frames after its summary")
                    frame.decode()
                    if frame.kind == frames.ERROR:
                        raise _failed_midway(self.url, frame.json())
                    if frame.kind == frames.SUMMARY:
                        finished = True
                        elapsed = frame.json().get("elapsed_s")
                        call.agent_s = elapsed if isinstance(elapsed, int | float) else None
                    yield frame
                if not finished:
                    raise ProtocolError(
                        f"the answer of the agent at {self.url} ended before its summary frame (connection cut?)"
                    )
        except Cancelled:
            raise
        except Exception as exc:
            self.cancellation.check()  # the client was closed under the call: not the link's fault
            if isinstance(exc, frames.FrameError):
                raise ProtocolError(f"malformed answer from the agent at {self.url}: {exc}") from None
            if isinstance(exc, httpx.TimeoutException):
                raise AgentUnavailable(f"agent at {self.url} timed out ({type(exc).__name__})") from None
            if isinstance(exc, httpx.TransportError):
                raise _transport_failure(self.url, exc, "unreachable or connection broken") from None
            raise

    def _within_deadline(self, chunks: Iterator[bytes], path: str, call: Call) -> Iterator[bytes]:
        """Pass the answer's chunks on until the call has run longer than its deadline."""
        deadline = time.monotonic() + self.deadline_s
        for chunk in chunks:
            call.body_from_agent += len(chunk)
            self.cancellation.check()
            if time.monotonic() > deadline:
                raise AgentUnavailable(
                    f"agent at {self.url}: {path} did not finish within {self.deadline_s:g} s (SERVICE_AGENT_DEADLINE_S)"
                )
            yield chunk

    def _call(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> httpx.Response:
        self.counter.requests += 1
        self.cancellation.check()
        try:
            with self.counter.call(f"{method} {path}") as call:
                response = self._http.request(method, path, json=body, params=params)
                call.body_to_agent, call.body_from_agent = len(response.request.content), len(response.content)
        except httpx.TimeoutException as exc:
            self.cancellation.check()
            raise AgentUnavailable(f"agent at {self.url} timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            self.cancellation.check()
            raise _transport_failure(self.url, exc, "unreachable") from None
        if response.status_code != 200:
            raise _rejection(response)
        return response


#: Sites remembered as held by their agents: one entry per view site and agent, so about the
#: views of every source; past it the longest unused is forgotten (its next request sends
#: the site in full once more), so that the memory does not grow with sources and views.
MAX_HELD_SITES = 20_000


class HeldSites:
    """(agent URL, site reference) of the sites each agent was sent in full and accepted, in
    this process, at most `limit` of them, the longest unused forgotten first: the next request
    for one names it by reference. Shared by the clients of all syncs.

    >>> held = HeldSites(limit=2)
    >>> held.add(("a", "1")); held.add(("a", "2")); ("a", "1") in held; held.add(("b", "3"))
    True
    >>> sorted(held._seen)  # ("a", "2") was the longest unused
    [('a', '1'), ('b', '3')]
    """

    def __init__(self, limit: int = MAX_HELD_SITES):
        self.limit = limit
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, held: tuple[str, str]) -> bool:
        with self._lock:
            if held not in self._seen:
                return False
            self._seen.move_to_end(held)
            return True

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, held: tuple[str, str]) -> None:
        with self._lock:
            self._seen[held] = None
            self._seen.move_to_end(held)
            while len(self._seen) > self.limit:
                self._seen.popitem(last=False)

    def discard(self, held: tuple[str, str]) -> None:
        with self._lock:
            self._seen.pop(held, None)


_HELD = HeldSites()


def _site_control(body: Iterable[bytes]) -> dict | None:
    """The control message of a list body whose first frame names a site in full, else None."""
    if not isinstance(body, list) or not body:
        return None
    try:
        parsed = list(frames.read_frames([body[0]]))
        control = parsed[0].json() if len(parsed) == 1 and parsed[0].kind == frames.CONTROL else None
    except frames.FrameError:
        return None
    return control if control is not None and isinstance(control.get("site"), dict) else None


def _counted(body: Iterable[bytes], call: Call) -> Iterator[bytes]:
    """The request body's chunks, their bytes added to the call's."""
    for chunk in body:
        call.body_to_agent += len(chunk)
        yield chunk


def _transport_failure(url: str, exc: httpx.TransportError, what: str) -> Exception:
    """A link failure is worth a retry; a certificate the service does not trust is not."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return AgentRejected(
            f"agent at {url}: its TLS certificate is not trusted ({cause.verify_message or cause}); "
            "if the agent uses a private or self-signed certificate, point SERVICE_AGENT_CA_BUNDLE at the CA certificate that signed it"
        )
    return AgentUnavailable(f"agent at {url} {what}: {type(exc).__name__}: {exc}")


def _failed_midway(url: str, info: dict) -> Exception:
    """The error an answer's error frame tells (the status line had gone out already)."""
    message = f"agent at {url}: {info.get('detail')}"
    if info.get("code") == SOURCE_ERROR:
        return _source_error(message, info)
    if info.get("transient"):
        return AgentUnavailable(message)
    return AgentRejected(message, info.get("status"), info.get("code"), info.get("changes"))


def _source_error(message: str, body: dict) -> SourceError:
    return SourceError(message, body.get("table"), body.get("column"), body.get("source_message"))


def _rejection(response: httpx.Response) -> Exception:
    try:
        body = response.json()
        detail = body.get("detail")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        body, detail = {}, response.text[:500]
    message = f"agent answered {response.status_code}: {detail}"
    if isinstance(body, dict) and body.get("code") == SOURCE_ERROR:
        return _source_error(message, body)
    if response.status_code == 429:
        return AgentBusy(message)
    if response.status_code in (502, 503, 504):
        return AgentUnavailable(message)
    return AgentRejected(message, response.status_code, body.get("code"), body.get("changes"))
