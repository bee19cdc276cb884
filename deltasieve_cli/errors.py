"""What the command can fail with, each with the exit status it ends the command with.

Every error is a `click.ClickException`, so click prints its message (never a traceback) and
exits with its `exit_code`; click's own usage errors exit with 2.
"""

from __future__ import annotations

import click

#: Exit statuses of the command (documented in its --help and in README).
EXIT_OK = 0
EXIT_FAILED = 1  # a sync failed, or the service answered the operation with an error
EXIT_USAGE = 2  # bad usage: click's UsageError and BadParameter
EXIT_UNREACHABLE = 3  # the service could not be reached


class CliError(click.ClickException):
    """The root of the command's errors: shown as `error: MESSAGE` on stderr."""

    exit_code = EXIT_FAILED

    def format_message(self) -> str:
        return self.message

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class ServiceError(CliError):
    """The service answered with an error status; `detail` is what it said."""

    def __init__(self, status: int, detail: str, method: str, path: str):
        self.status = status
        self.detail = detail
        super().__init__(f"{method} {path} → {status}: {detail}")


class Unreachable(CliError):
    """No answer from the service: it is not running, or not at that address."""

    exit_code = EXIT_UNREACHABLE

    def __init__(self, url: str, reason: str):
        super().__init__(
            f"cannot reach the deltasieve service at {url} ({reason}); is it running? "
            "Point the command at it with --url or DELTASIEVE_URL"
        )


class SyncFailed(CliError):
    """A sync the command started or followed ended as failed."""

    def __init__(self, view: str, sync_id: str, error: str | None):
        super().__init__(f"sync {sync_id} of view {view} failed: {error or 'no error recorded'}")


class NoSync(CliError):
    """Nothing to follow or read: no sync of the view is under way, or none succeeded."""


class SchemaChanged(CliError):
    """A CSV or Parquet file would span a sync that redefined the view (one schema per file)."""

    def __init__(self, view: str, sync_id: str, before: list[str], after: str | None, feed: bool):
        why = f"sync {sync_id} redefined view {view} (a schema line starts its delta); one CSV or Parquet file holds one schema"
        if not feed:
            super().__init__(f"{why}: read this delta with --format ndjson")
            return
        start = f" --after {after}" if after else ""
        parts = [f"deltasieve changes {view}{start} --limit-syncs {len(before)} --format ..."] if before else []
        last = before[-1] if before else after
        parts.append(f"deltasieve changes {view}{f' --after {last}' if last else ''} --limit-syncs 1 (ndjson)")
        parts.append(f"deltasieve changes {view} --after {sync_id} --format ...")
        super().__init__(f"{why}: read it in parts: " + "; then ".join(parts))
