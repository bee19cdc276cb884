"""Reading the site query in a process of its own, ahead of the hashing and sending.

The agent's scan has two halves of about equal cost: the database driver builds Python rows
and RowConverter turns them into Arrow batches (reading), then the strategy fingerprints,
hashes and folds the batches and the HTTP layer sends frames (answering). Both halves hold
Python's GIL for most of their time, so a reading *thread* gains nothing (measured, see
chunks.py); a reading *process* does: while the answer's thread hashes batch n, the reader
reads and converts batch n + 1 on the other core, and a scan takes about as long as the
slower half instead of the sum of both.

The reader runs the very same `chunks.batches` as an in-process scan, on a connection of
its own: keyset chunks, each its own short read-only transaction, the statement timeout,
the key checks and their errors are unchanged. Batches cross a pipe as Arrow IPC messages
(a memory copy, no Python object per value), each read straight into one buffer that Arrow
then reads in place (`_receive`): multiprocessing's `recv_bytes` would copy it twice more
and allocate as much again for every read of the pipe, a quarter of a second of the answer's
thread per million students rows. The pipe holds at most `PIPE_BYTES`, less than a batch,
so the reader is at most about one batch ahead: memory stays one chunk of raw rows in the
reader plus a batch or two in flight. Its errors (a NULL key, a timeout, an unreachable database) are raised
again in the answer's thread; if the answer stops early (an error, the warehouse hung up),
the reader is killed, which ends its transaction (SQLite's lock is released by the
operating system, PostgreSQL aborts a transaction whose connection drops).

Readers are forked from a fork server started with the agent (`start`), which has the
agent's modules imported already: a reader starts in milliseconds, in a process that
never saw the agent's threads, and its memory is returned when its scan ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import struct
from collections.abc import Generator, Sequence
from multiprocessing.connection import Connection

import pyarrow as pa

from remote_agent import chunks, without_dataframes
from remote_agent.adapters.base import Adapter, Session
from remote_agent.adapters.rows import RowConverter
from remote_agent.errors import AgentError, ReaderLost
from remote_agent.pacing import Pacer
from remote_agent.settings import ScanSettings
from remote_agent.sitequery import ValidatedQuery
from remote_agent.timings import Timings

log = logging.getLogger(__name__)

_CONTEXT = multiprocessing.get_context("forkserver")
#: The server imports this module through reader_server, which refuses pandas and polars first.
_CONTEXT.set_forkserver_preload(["remote_agent.reader_server"])

#: Message kinds on the pipe. A message is a head (the kind, the reader's read and convert
#: seconds since the previous message, the payload's length) and then the payload: for a
#: batch its IPC bytes as Arrow wrote them, written from Arrow's buffer, not copied behind
#: the head.
_BATCH, _DONE, _FAILED = b"B", b"D", b"E"
_HEAD = struct.Struct("<cddQ")
#: Bytes the pipe may hold (Linux's default is 64 KiB): fewer, larger reads and writes for the
#: two processes, and still under a batch (1.7 MB for 10,000 students rows).
PIPE_BYTES = 1 << 20
#: Seconds to wait for a killed reader to be gone.
_JOIN_S = 5.0


def start(preload: Sequence[str] = ()) -> None:
    """Start the fork server now (a second or so of imports), not at the first scan.

    `preload`: modules the server imports after its own (`Adapter.reader_preload`), so that
    what they load is loaded once, not in every reader.
    """
    _CONTEXT.set_forkserver_preload(["remote_agent.reader_server", *preload])
    multiprocessing.forkserver.ensure_running()


def batches(
    adapter: Adapter,
    query: ValidatedQuery,
    converter: RowConverter,
    scan: ScanSettings,
    *,
    batch_rows: int,
    timings: Timings,
    session: Session | None = None,
    pacer: Pacer | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """`chunks.batches` in chunks of `scan.chunk_rows`, read in a reader process when
    `scan.read_ahead`, which opens a connection of its own; else read here, on `session` or
    on a new one.

    The reader's seconds reading and converting go to `timings.read_s` and `convert_s`
    (they overlap the answer's own phases); the answer's thread waiting for a batch goes
    to `wait_s`. `pacer` paces the chunks (pacing.py; `scan.pacer()` builds the one of its
    settings); a reader process paces with a copy and hands its state back at the end, so
    `pacer.report()` describes the scan either way.
    """
    chunk_rows = scan.chunk_rows
    if not scan.read_ahead:
        with contextlib.nullcontext(session) if session is not None else adapter.session() as here:
            yield from chunks.batches(
                adapter,
                here,
                query,
                converter,
                chunk_rows=chunk_rows,
                batch_rows=batch_rows,
                timings=timings,
                pacer=pacer,
            )
        return
    receiving, sending = _CONTEXT.Pipe(duplex=False)
    _widen(receiving)
    reader = _CONTEXT.Process(
        target=_read,
        args=(adapter, query, chunk_rows, batch_rows, sending, pacer),
        name="deltasieve-reader",
        daemon=True,
    )
    reader.start()
    sending.close()  # the reader holds the only sending end: its death ends the pipe
    try:
        while True:
            with timings.phase("wait_s"):
                try:
                    kind, read_s, convert_s, size = _HEAD.unpack(_receive(receiving, _HEAD.size))
                    payload = _receive(receiving, size)
                except EOFError:
                    reader.join(_JOIN_S)
                    raise ReaderLost(
                        f"the agent's reader process ended without finishing the scan (exit code {reader.exitcode}); retry the sync"
                    ) from None
            timings.seconds["read_s"] += read_s
            timings.seconds["convert_s"] += convert_s
            if kind == _BATCH:
                yield pa.ipc.read_record_batch(payload, converter.schema)
            elif kind == _DONE:
                if pacer is not None and size:
                    pacer.absorb(pickle.loads(payload))
                return
            else:
                raise pickle.loads(payload)
    finally:
        receiving.close()
        if reader.is_alive():
            reader.kill()
        reader.join(_JOIN_S)


def _read(
    adapter: Adapter,
    query: ValidatedQuery,
    chunk_rows: int,
    batch_rows: int,
    sending: Connection,
    pacer: Pacer | None = None,
) -> None:
    """The reader process: every batch of the scan down the pipe, then DONE (with the
    pacer's state) or the error."""
    without_dataframes.install()
    timings = Timings()

    def send(kind: bytes, payload: bytes | pa.Buffer = b"") -> None:
        head = _HEAD.pack(kind, timings.seconds["read_s"], timings.seconds["convert_s"], len(payload))
        timings.seconds["read_s"] = timings.seconds["convert_s"] = 0.0
        _send(sending, head, payload)

    try:
        converter = RowConverter(adapter, query.columns, query.where(), hash_key=query.hash_key)
        with adapter.session() as session:
            scanned = chunks.batches(
                adapter,
                session,
                query,
                converter,
                chunk_rows=chunk_rows,
                batch_rows=batch_rows,
                timings=timings,
                pacer=pacer,
            )
            for batch in scanned:
                send(_BATCH, batch.serialize())
        send(_DONE, pickle.dumps(pacer) if pacer is not None else b"")
    except BrokenPipeError:
        return  # the answer stopped listening
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the answer
        if not isinstance(exc, AgentError):
            log.exception("the reader process failed")
        send(_FAILED, _picklable(exc))
    finally:
        sending.close()


def _widen(pipe: Connection) -> None:
    """Let the pipe hold `PIPE_BYTES` where the system allows (Linux), else leave it as it is."""
    with contextlib.suppress(AttributeError, OSError):  # no F_SETPIPE_SZ, or over the system's limit
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _send(pipe: Connection, head: bytes, payload: bytes | pa.Buffer) -> None:
    """The head and the payload down the pipe, the payload written from its own memory."""
    fd = pipe.fileno()
    for part in (memoryview(head), memoryview(payload)):
        while len(part):
            part = part[os.write(fd, part) :]


def _receive(pipe: Connection, size: int) -> pa.Buffer:
    """The next `size` bytes of the pipe, read into one new buffer of Arrow's (EOFError: the
    pipe ended first).

    >>> receiving, sending = multiprocessing.Pipe(duplex=False)
    >>> _send(sending, b"head", pa.py_buffer(b"payload"))
    >>> _receive(receiving, 4).to_pybytes(), _receive(receiving, 7).to_pybytes()
    (b'head', b'payload')
    """
    buffer = pa.allocate_buffer(size)
    view, fd, got = memoryview(buffer), pipe.fileno(), 0
    while got < size:
        read = os.readv(fd, [view[got:]])
        if not read:
            raise EOFError(f"the pipe ended {size - got} bytes before the message did")
        got += read
    return buffer


def _picklable(exc: BaseException) -> bytes:
    """The exception pickled, or a plain one of its text when it does not pickle.

    >>> pickle.loads(_picklable(ValueError("bad"))).args
    ('bad',)
    """
    try:
        return pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - an exception that will not pickle is still reported
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
