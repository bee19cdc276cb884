"""Human output (rich tables) and machine output (JSON, NDJSON) of the command."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.table import Table

#: Scalars shown per sync in `deltasieve syncs` and the summary of `deltasieve sync`.
SUMMARY_METRICS = (
    ("rows_inserted", "inserted"),
    ("rows_updated", "updated"),
    ("rows_deleted", "deleted"),
    ("bytes_to_agent", "bytes to agent"),
    ("bytes_from_agent", "bytes from agent"),
    ("round_trips", "round trips"),
    ("wall_seconds", "seconds"),
)


def human_bytes(n: float | None) -> str:
    """A byte count for people.

    >>> human_bytes(512), human_bytes(2048), human_bytes(3 * 1024**2 + 1)
    ('512 B', '2.0 KiB', '3.0 MiB')
    """
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def cell(value: object) -> str:
    """A value as a table cell: numbers with separators, nested values as compact JSON.

    >>> cell(12345), cell(None), cell(2.9943661971830986), cell({"a": [1, 2]}), cell(True)
    ('12,345', '-', '2.99437', '{"a":[1,2]}', 'yes')
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def flatten(data: dict, prefix: str = "") -> dict:
    """Nested dicts as one level of dotted keys (lists stay whole).

    >>> flatten({"a": 1, "b": {"c": 2, "d": {"e": None}}})
    {'a': 1, 'b.c': 2, 'b.d.e': None}
    """
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def sparkline(counts: list[int]) -> str:
    """A histogram's counts as a row of bars, the largest full height.

    >>> sparkline([0, 1, 4, 8])
    '▁▂▅█'
    """
    top = max(counts, default=0)
    return "".join(SPARKS[0 if not top else round(c / top * (len(SPARKS) - 1))] for c in counts)


SPARKS = "▁▂▃▄▅▆▇█"


def fields(title: str | None, data: dict) -> Table:
    """A two-column table of a record's fields, nested ones dotted."""
    table = Table(title=title, show_header=False, title_justify="left", title_style="bold")
    table.add_column("field", style="bold", overflow="fold")
    table.add_column("value", overflow="fold")
    for key, value in flatten(data).items():
        table.add_row(key, cell(value))
    return table


def rows(columns: list[str], records: list[dict], *, title: str | None = None, whole: tuple[str, ...] = ()) -> Table:
    """A table of records, one column per name; the `whole` columns never wrap (names, ids)."""
    table = Table(title=title, title_justify="left", title_style="bold")
    for name in columns:
        table.add_column(name, overflow="fold", no_wrap=name in whole)
    for record in records:
        table.add_row(*(cell(record.get(name)) for name in columns))
    return table


def sync_summary(record: dict) -> Table:
    """The end of a sync: its status, rows by operation, bytes each way, seconds, error."""
    metrics = record.get("metrics") or {}
    table = Table(show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    style = {"succeeded": "green", "failed": "red"}.get(record["status"], "yellow")
    table.add_row("view", record["view"])
    table.add_row("sync", record["id"])
    table.add_row("status", f"[{style}]{record['status']}[/]")
    if metrics.get("mode"):
        table.add_row("mode", str(metrics["mode"]))
    for key, label in SUMMARY_METRICS:
        value = metrics.get(key)
        table.add_row(label, human_bytes(value) if key.startswith("bytes") else cell(value))
    verify = metrics.get("verify")
    if isinstance(verify, dict):
        table.add_row("verify: divergent rows", cell(verify.get("divergent_rows")))
    if record.get("error"):
        table.add_row("error", f"[red]{record['error']}[/]")
    return table


#: The widest a table grows when stdout is not a terminal.
PIPED_WIDTH = 250


def write_stdout(text: str | bytes) -> None:
    """Write to stdout; a reader that has gone (`deltasieve rows v | head`) ends the command quietly."""
    try:
        if isinstance(text, bytes):
            sys.stdout.buffer.write(text)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


def stdout_gone() -> None:
    """End the command with 0 after the reader of stdout went away: it took what it wanted.
    Python would complain when it flushes stdout at exit, so stdout goes to /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise click.exceptions.Exit(0)


class Output:
    """Where the command writes: machine output (JSON) or human output (rich) on stdout, notes on stderr."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        # a terminal's tables fit its width; piped or redirected, they take the width they need
        self.out = Console(soft_wrap=False)
        if not self.out.is_terminal and "COLUMNS" not in os.environ:
            self.out.width = PIPED_WIDTH
        self.err = Console(stderr=True)

    def json(self, document: object) -> None:
        """One JSON document on stdout."""
        write_stdout(json.dumps(document, indent=2) + "\n")

    def ndjson(self, document: object) -> None:
        """One line of an NDJSON stream on stdout."""
        write_stdout(json.dumps(document, separators=(",", ":")) + "\n")

    def json_err(self, document: object) -> None:
        """One JSON document on a line of stderr (beside a stream that keeps stdout to itself)."""
        sys.stderr.write(json.dumps(document, separators=(",", ":")) + "\n")
        sys.stderr.flush()

    def show(self, renderable) -> None:
        self.out.print(renderable)

    def note(self, text: str) -> None:
        """A remark for the person at the terminal, on stderr (never mixed into the data).

        Never hard-wrapped: a note may end with a command to copy, which a line break
        inserted where stderr is not a terminal (80 columns) would cut in two; a terminal
        wraps the line itself and a copy keeps it whole."""
        self.err.print(text, highlight=False, soft_wrap=True)
