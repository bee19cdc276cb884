"""`deltasieve sync`, `watch` and `syncs`: start syncs, follow them, list them."""

from __future__ import annotations

import click

from deltasieve_cli.client import Client
from deltasieve_cli.commands import command, short_time
from deltasieve_cli.data import pick_sync
from deltasieve_cli.errors import NoSync, SyncFailed
from deltasieve_cli.follow import Quiet, display_for, follow, wait_for_active
from deltasieve_cli.render import Output, human_bytes, rows, sync_summary

#: Seconds `deltasieve watch` waits for a sync of the view to start, unless told otherwise.
DEFAULT_WATCH_TIMEOUT_S = 60.0


def finish(out: Output, record: dict) -> None:
    """Print a finished sync's summary (or record); a failed sync ends the command with 1."""
    out.json(record) if out.as_json else out.show(sync_summary(record))
    if record["status"] == "failed":
        raise SyncFailed(record["view"], record["id"], record.get("error"))


def follow_to_end(client: Client, out: Output, view: str, sync_id: str, *, stream: bool) -> dict:
    """Follow a sync: a live bar (phase lines off a terminal) on stderr, or with `stream` every
    change of its record as an NDJSON line; Ctrl-C stops following, not the sync."""
    label = f"{view} {sync_id[:8]}"
    display = Quiet() if out.as_json else display_for(out.err, label)
    try:
        return follow(client, view, sync_id, display, on_change=out.ndjson if stream else lambda r: None)
    except KeyboardInterrupt:
        out.note(f"stopped following; sync {sync_id} goes on (deltasieve watch {view})")
        raise click.exceptions.Exit(130) from None


@command(None, "sync")
@click.argument("view_name", metavar="VIEW")
@click.argument("sync_id", metavar="[SYNC]", required=False)
@click.option("--verify", is_flag=True, help="Audit mode: also read every site query in full and compare.")
@click.option("--no-wait", is_flag=True, help="Start the sync and print its id; do not follow it.")
@click.option(
    "--cancel",
    is_flag=True,
    help="Cancel the sync of VIEW that is queued or running (or SYNC: its id or the start of it) instead.",
)
def sync(
    client: Client, out: Output, view_name: str, sync_id: str | None, verify: bool, no_wait: bool, cancel: bool
) -> None:
    """Start a sync of VIEW (the first one loads it) and follow it to its end with a progress
    bar; then print its summary (--json: the finished record). Exit status 1 when the sync fails.

    With --cancel, stop VIEW's queued or running sync instead: a queued one never runs, a
    running one ends at once; either ends failed with error_code cancelled, and the view keeps
    its last version."""
    if not cancel:
        if sync_id is not None:
            raise click.UsageError("SYNC is only taken with --cancel (deltasieve sync VIEW --cancel [SYNC])")
        return start(client, out, view_name, verify, no_wait)
    target = pick_sync(client, view_name, sync_id) if sync_id is not None else active_sync(client, view_name)
    record = client.request("DELETE", f"/v1/views/{view_name}/syncs/{target}").json()
    if out.as_json:
        return out.json(record)
    out.show(f"cancelling sync {target} of {view_name} (it was {record['status']})")


def active_sync(client: Client, view: str) -> str:
    """The id of the view's sync that is queued or running."""
    listed = client.get(f"/v1/views/{view}/syncs")  # newest first: one under way is the newest
    if listed and listed[0]["status"] in ("queued", "running"):
        return listed[0]["id"]
    raise NoSync(f"no sync of view {view} is queued or running")


def start(client: Client, out: Output, view_name: str, verify: bool, no_wait: bool) -> None:
    """Start a sync of the view; follow it to its end unless `no_wait`."""
    params = {"mode": "verify"} if verify else {}
    queued = client.post(f"/v1/views/{view_name}/syncs", None, **params)
    if no_wait:
        if out.as_json:
            return out.json(queued)
        out.show(queued["id"])
        return out.note(f"sync queued; follow it with: deltasieve watch {view_name}")
    finish(out, follow_to_end(client, out, view_name, queued["id"], stream=False))


@command(None, "watch")
@click.argument("view_name", metavar="VIEW")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_WATCH_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for a sync to start when none is queued or running.",
)
def watch(client: Client, out: Output, view_name: str, timeout: float) -> None:
    """Follow the sync of VIEW that is queued or running until it ends, waiting for one to
    start if there is none (--json: its record at each change, as NDJSON). Exit status 1 when
    it fails, or when none started in time."""
    client.get(f"/v1/views/{view_name}")  # an unknown view: the service's 404, not a wait
    try:
        waiting = lambda: out.note(f"waiting up to {timeout:g} s for a sync of {view_name} to start")  # noqa: E731
        active = wait_for_active(client, view_name, timeout, on_wait=waiting)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None
    if active is None:
        raise NoSync(f"no sync of view {view_name} is queued or running (waited {timeout:g} s)")
    record = follow_to_end(client, out, view_name, active["id"], stream=out.as_json)
    if out.as_json:
        if record["status"] == "failed":
            raise SyncFailed(record["view"], record["id"], record.get("error"))
        return
    finish(out, record)


@command(None, "syncs")
@click.argument("view_name", metavar="VIEW")
@click.option("--limit", type=click.IntRange(min=1), help="Only the newest this many.")
def syncs(client: Client, out: Output, view_name: str, limit: int | None) -> None:
    """The syncs of VIEW, newest first."""
    listed = client.get(f"/v1/views/{view_name}/syncs")[:limit]
    if out.as_json:
        return out.json(listed)
    table = []
    for record in listed:
        metrics = record.get("metrics") or {}
        line = {
            "id": record["id"][:SHORT_ID],
            "status": record["status"],
            "trigger": record.get("trigger"),
            "started": short_time(record.get("started_at")),
            "waited s": record.get("queued_s"),
        }
        for key, label in SYNCS_COLUMNS:
            value = metrics.get(key)
            line[label] = human_bytes(value) if key.startswith("bytes") and value is not None else value
        line["error"] = record.get("error")
        table.append(line)
    names = ["id", "status", "trigger", "started", "waited s", *(label for _, label in SYNCS_COLUMNS), "error"]
    out.show(rows(names, table, title=f"syncs of {view_name}", whole=("id", "status")))


#: Characters of a sync id `deltasieve syncs` shows (commands take any unique prefix; --json has it whole).
SHORT_ID = 12
#: The metrics `deltasieve syncs` shows, with short headings (the table has a row per sync).
SYNCS_COLUMNS = (
    ("rows_inserted", "ins"),
    ("rows_updated", "upd"),
    ("rows_deleted", "del"),
    ("bytes_to_agent", "to agent"),
    ("bytes_from_agent", "from agent"),
    ("wall_seconds", "s"),
)
