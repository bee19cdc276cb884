"""Following a sync to its end by polling its record, and showing its `progress` meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from deltasieve_cli.client import Client
from deltasieve_cli.render import human_bytes

#: Seconds between two polls of a sync's record (the service writes progress at most every 0.5 s).
POLL_INTERVAL_S = 0.5
DONE = ("succeeded", "failed")
ACTIVE = ("queued", "running")
#: Keys of `progress` read as rows so far, and as the rows expected in all, first found first.
ROWS_KEYS = ("rows", "rows_received", "rows_scanned", "rows_read")
TOTAL_KEYS = ("rows_total", "total_rows", "rows_expected")


def describe(record: dict) -> str:
    """What a sync is doing, in a few words, from its status and `progress`.

    >>> describe({"status": "running", "progress": {"phase": "exchange_units", "site": 0}})
    'exchange_units (site 0)'
    >>> describe({"status": "running", "progress": {"phase": "retry_wait", "site": 1, "attempt": 1, "retry_in_s": 2}})
    'retry_wait (site 1, attempt 1 failed, retry in 2 s)'
    >>> describe({"status": "queued", "progress": None})
    'queued'
    """
    progress = record.get("progress") or {}
    phase = progress.get("phase")
    if record["status"] != "running" or not phase:
        return record["status"]
    parts = []
    if progress.get("site") is not None:
        parts.append(f"site {progress['site']}")
    if progress.get("attempt") is not None:
        parts.append(f"attempt {progress['attempt']} failed")
    if progress.get("retry_in_s") is not None:
        parts.append(f"retry in {progress['retry_in_s']:g} s")
    return f"{phase} ({', '.join(parts)})" if parts else phase


def _first(progress: dict, keys: tuple[str, ...]) -> float | None:
    return next((progress[k] for k in keys if isinstance(progress.get(k), int | float)), None)


def counters(progress: dict | None) -> dict:
    """Rows, expected rows, bytes each way and ETA of a `progress`, as the bar shows them.

    >>> counters({"phase": "p", "rows_received": 1500, "bytes_to_agent": 2048, "bytes_from_agent": 0})
    {'rows': '1,500 rows', 'bytes': '↑ 2.0 KiB ↓ 0 B', 'eta': ''}
    >>> counters({"rows": 10, "rows_total": 40, "eta_s": 75})["eta"]
    'ETA 0:01:15'
    """
    progress = progress or {}
    rows, total = _first(progress, ROWS_KEYS), _first(progress, TOTAL_KEYS)
    text = "" if rows is None else f"{rows:,} rows" if total is None else f"{rows:,}/{total:,} rows"
    up, down = progress.get("bytes_to_agent"), progress.get("bytes_from_agent")
    traffic = "" if not up and not down else f"↑ {human_bytes(up or 0)} ↓ {human_bytes(down or 0)}"
    eta = progress.get("eta_s")
    eta_text = f"ETA {int(eta) // 3600}:{int(eta) % 3600 // 60:02d}:{int(eta) % 60:02d}" if eta is not None else ""
    return {"rows": text, "bytes": traffic, "eta": eta_text}


class LiveBar:
    """A rich progress bar on a terminal: phase, a bar (a pulse while no total is known),
    rows, bytes each way, elapsed time, and the ETA when the record carries one."""

    def __init__(self, console: Console, label: str):
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[label]}[/] {task.description}"),
            BarColumn(),
            TextColumn("{task.fields[rows]}"),
            TextColumn("{task.fields[bytes]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task("starting", total=None, label=label, **counters(None))

    def __enter__(self) -> LiveBar:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self, record: dict) -> None:
        done = record["status"] in DONE
        # a finished record has no progress: its metrics hold the final counts
        progress = (record.get("metrics") if done else record.get("progress")) or {}
        total = _first(progress, TOTAL_KEYS)
        completed = 1 if done and total is None else _first(progress, ROWS_KEYS) or 0
        self.progress.update(
            self.task,
            description=describe(record),
            total=1 if done and total is None else total,
            completed=total if done and total is not None else completed,
            **counters(progress),
        )


class PhaseLines:
    """Without a terminal (a log, a pipe): one line whenever the phase changes."""

    def __init__(self, console: Console, label: str):
        self.console, self.label = console, label
        self.last: str | None = None

    def __enter__(self) -> PhaseLines:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, record: dict) -> None:
        now = describe(record)
        if now != self.last and record["status"] not in DONE:
            extra = " ".join(v for v in counters(record.get("progress")).values() if v)
            self.console.print(f"{self.label} {now} {extra}".rstrip(), highlight=False)
            self.last = now


class Quiet:
    """No display (machine output)."""

    def __enter__(self) -> Quiet:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, record: dict) -> None:
        pass


def follow(
    client: Client,
    view: str,
    sync_id: str,
    display,
    *,
    on_change: Callable[[dict], None] = lambda record: None,
    interval_s: float = POLL_INTERVAL_S,
) -> dict:
    """Poll the sync's record until it has ended and return it; `display` and `on_change`
    see each record (`on_change` only those whose status or progress differ from the last)."""
    last = None
    with display:
        while True:
            record = client.get(f"/v1/views/{view}/syncs/{sync_id}")
            display.update(record)
            seen = (record["status"], record.get("progress"))
            if seen != last:
                on_change(record)
                last = seen
            if record["status"] in DONE:
                return record
            time.sleep(interval_s)


def wait_for_active(
    client: Client,
    view: str,
    timeout_s: float,
    *,
    on_wait: Callable[[], None] = lambda: None,
    interval_s: float = POLL_INTERVAL_S,
) -> dict | None:
    """The view's sync that is queued or running, waiting up to `timeout_s` for one to start
    (`on_wait` is called once, when there is none at first). A sync that started while this
    waited is followed even when it has ended between two looks (a sync that finds nothing
    changed may take less than a poll)."""
    deadline = time.monotonic() + timeout_s
    first = True
    seen: set[str] | None = None
    while True:
        listed = client.get(f"/v1/views/{view}/syncs")
        for record in listed:
            if record["status"] in ACTIVE or (seen is not None and record["id"] not in seen):
                return record
        seen = {record["id"] for record in listed}
        if time.monotonic() >= deadline:
            return None
        if first:
            on_wait()
            first = False
        time.sleep(interval_s)


def display_for(console: Console, label: str):
    """A live bar on a terminal, phase lines elsewhere."""
    return LiveBar(console, label) if console.is_terminal else PhaseLines(console, label)
