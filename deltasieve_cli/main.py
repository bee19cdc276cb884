"""The `deltasieve` command: sources, views and syncs of a deltasieve service, from a shell."""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

import click
from httpx import Headers

from deltasieve_cli import formats
from deltasieve_cli.client import Client
from deltasieve_cli.errors import NoSync, SyncFailed
from deltasieve_cli.follow import Quiet, display_for, follow, wait_for_active
from deltasieve_cli.render import Output, fields, human_bytes, rows, sparkline, stdout_gone, sync_summary

DEFAULT_URL = "http://127.0.0.1:8000"
#: Seconds `deltasieve watch` waits for a sync of the view to start, unless told otherwise.
DEFAULT_WATCH_TIMEOUT_S = 60.0

EPILOG = """\b
Exit status:
  0  success
  1  a sync failed, or the service answered the operation with an error
     (its detail is printed)
  2  bad usage: unknown command or option, missing or malformed argument
  3  the service could not be reached (see --url / DELTASIEVE_URL)
  130  interrupted (Ctrl-C); a sync being followed goes on

\b
Machine output: --json (before or after the command) prints one JSON document,
or NDJSON for streams (rows, delta, changes, watch); without it, tables for people.
"""

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class State:
    """What the global options set: the service and the output mode."""

    def __init__(self, url: str, api_key: str | None, as_json: bool):
        self.client = Client(url, api_key)
        self.as_json = as_json


def command(group: click.Group, name: str | None = None, **kwargs):
    """A subcommand that takes --json and gets (client, output) first."""

    def wrap(fn):
        @group.command(name, context_settings=CONTEXT, **kwargs)
        @click.option("--json", "as_json", is_flag=True, help="Machine output: JSON (NDJSON for streams).")
        @click.pass_obj
        @functools.wraps(fn)
        def run(state: State, as_json: bool, **params):
            return fn(state.client, Output(as_json or state.as_json), **params)

        return run

    return wrap


@click.group(context_settings=CONTEXT, epilog=EPILOG)
@click.option(
    "--url",
    envvar="DELTASIEVE_URL",
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    help="The service's base URL.",
)
@click.option(
    "--api-key",
    envvar="DELTASIEVE_API_KEY",
    show_envvar=True,
    help="Sent as X-API-Key (a service with SERVICE_API_KEY needs it on every change).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine output for any command (as its own --json).")
@click.version_option(package_name="deltasieve", prog_name="deltasieve")
@click.pass_context
def cli(ctx: click.Context, url: str, api_key: str | None, as_json: bool) -> None:
    """Client of a deltasieve service: register sources, define views, run and follow syncs,
    read their deltas and the views' rows."""
    ctx.obj = State(url, api_key, as_json)
    ctx.call_on_close(ctx.obj.client.close)


# -- sources ----------------------------------------------------------------------------
@cli.group(context_settings=CONTEXT)
def source() -> None:
    """Agents the warehouse reads from (POST/GET /v1/sources)."""


SOURCE_COLUMNS = ["name", "url", "has_token", "created_at"]


@command(source, "add")
@click.argument("name")
@click.argument("url")
@click.option("--token", help="The agent's bearer token (the service never shows it again).")
def source_add(client: Client, out: Output, name: str, url: str, token: str | None) -> None:
    """Register the agent at URL as source NAME (the NAME view SQL writes as NAME.table)."""
    created = client.post("/v1/sources", {"name": name, "url": url, "token": token})
    out.json(created) if out.as_json else out.show(fields(f"source {name} added", created))


@command(source, "list")
def source_list(client: Client, out: Output) -> None:
    """The registered sources."""
    listed = client.get("/v1/sources")
    if out.as_json:
        return out.json(listed)
    shown = [{**record, "created_at": short_time(record["created_at"])} for record in listed]
    out.show(rows(SOURCE_COLUMNS, shown, title="sources", whole=("name",)))


@command(source, "show")
@click.argument("name")
def source_show(client: Client, out: Output, name: str) -> None:
    """One source."""
    found = client.get(f"/v1/sources/{name}")
    out.json(found) if out.as_json else out.show(fields(f"source {name}", found))


# -- views ------------------------------------------------------------------------------
@cli.group(context_settings=CONTEXT)
def view() -> None:
    """Views kept in step with their sources (POST/GET/DELETE /v1/views)."""


def pairs(kind: type = str):
    """A click callback turning repeated KEY=VALUE options into a dict."""

    def parse(ctx, param, values: tuple[str, ...]) -> dict:
        out = {}
        for text in values:
            key, sep, value = text.partition("=")
            if not sep or not key or not value:
                raise click.BadParameter(f"{text!r} is not KEY=VALUE", ctx=ctx, param=param)
            try:
                out[key] = kind(value)
            except ValueError:
                raise click.BadParameter(f"{value!r} in {text!r} is not a {kind.__name__}", ctx, param) from None
        return out

    return parse


#: `view add` and `view set`: the view's schedule (the service checks the range, 1 s to a year).
EVERY_S = click.option(
    "--every-s",
    type=click.IntRange(min=1),
    metavar="N",
    help="Have the service sync the view by itself, N seconds after its last sync ended.",
)


@command(view, "add")
@click.argument("name")
@click.argument("sql")
@click.option("--strategy", help="How syncs find changes: auto (the service's default), sketch, group_hash, …")
@click.option("--sample-size", type=click.IntRange(min=0), help="Keep a uniform random sample of this many rows.")
@click.option(
    "--timestamp",
    "timestamps",
    multiple=True,
    metavar="TABLE=COLUMN",
    callback=pairs(),
    help="A table's last-modified column (strategy timestamp); repeatable.",
)
@click.option(
    "--delete-flag",
    "delete_flags",
    multiple=True,
    metavar="TABLE=COLUMN",
    callback=pairs(),
    help="A table's soft-delete marker; repeatable.",
)
@click.option("--timestamp-lag-s", type=click.FloatRange(min=0), help="Seconds read before the last watermark.")
@click.option("--reconcile-every", type=click.IntRange(min=1), help="Syncs between full reconciliations.")
@click.option(
    "--diff-algorithm",
    type=click.Choice(["window", "sort_merge", "partitioned_hash"]),
    help="snapshot_diff: how the agent compares two dumps.",
)
@click.option("--aging-rows", type=click.IntRange(min=1), help="snapshot_diff: records per aging buffer.")
@click.option("--block-rows", type=click.IntRange(min=1), help="snapshot_diff: records read at a time.")
@click.option("--match-order-by", metavar="COLUMN", help="Keyless views: pair vanished and appeared rows along this.")
@click.option(
    "--match-epsilon",
    multiple=True,
    metavar="COLUMN=NUMBER",
    callback=pairs(float),
    help="Keyless views: how far a pair may differ in COLUMN; repeatable.",
)
@EVERY_S
def view_add(client: Client, out: Output, name: str, sql: str, **options) -> None:
    """Define view NAME by SQL, a project-select-join over source.table (the service checks it
    and says what it cannot maintain). The view's key is derived from its tables' keys."""
    body = {"name": name, "sql": sql}
    for key in ("strategy", "sample_size", "timestamps", "delete_flags", "timestamp_lag_s", "reconcile_every"):
        if options[key] not in (None, {}):
            body[key] = options[key]
    diff = {"algorithm": options["diff_algorithm"], "aging_rows": options["aging_rows"]}
    diff["block_rows"] = options["block_rows"]
    if any(v is not None for v in diff.values()):
        body["snapshot_diff"] = {k: v for k, v in diff.items() if v is not None}
    if options["match_order_by"] or options["match_epsilon"]:
        body["match"] = {"order_by": options["match_order_by"], "epsilon": options["match_epsilon"]}
    if options["every_s"] is not None:
        body["schedule"] = {"every_s": options["every_s"]}
    created = client.post("/v1/views", body)
    if out.as_json:
        return out.json(created)
    out.show(view_fields(f"view {name} added", created))
    out.note(f"load it with: deltasieve sync {name}")


def schedule_text(view: dict) -> str:
    """A view's schedule for people.

    >>> schedule_text({"schedule": {"every_s": 300}}), schedule_text({"schedule": None})
    ('every 300 s', 'none')
    """
    schedule = view.get("schedule")
    return f"every {schedule['every_s']:,} s" if schedule else "none"


def next_run_text(view: dict) -> str | None:
    """When the service syncs the view next (UTC), for people; None when it will not by itself."""
    return short_time(view.get("next_run_at")) if view.get("schedule") else None


def view_fields(title: str, view: dict):
    """A view's definition without the bulky parts (column types and site columns, key derivation)."""
    hidden = ("sites", "column_types", "key_derivation", "columns", "schedule", "next_run_at")
    shown = {k: v for k, v in view.items() if k not in hidden}
    shown["schedule"] = schedule_text(view)
    if view.get("schedule"):
        shown["next run (UTC)"] = next_run_text(view) or "after the sync under way (or the scheduler is off)"
    shown["columns"] = ", ".join(f"{c} {view.get('column_types', {}).get(c, '')}".strip() for c in view["columns"])
    shown["key"] = ", ".join(view["key"])
    for i, site in enumerate(view["sites"]):
        shown[f"site {i} ({site['source']})"] = site["sql"]
    return fields(title, shown)


@command(view, "list")
def view_list(client: Client, out: Output) -> None:
    """The defined views."""
    listed = client.get("/v1/views")
    if out.as_json:
        return out.json(listed)
    summary = [
        {
            "name": v["name"],
            "strategy": v["strategy"],
            "key": ", ".join(v["key"]),
            "columns": len(v["columns"]),
            "sources": ", ".join(sorted({s["source"] for s in v["sites"]})),
            "sample_size": v.get("sample_size", 0),
            "schedule": schedule_text(v) if v.get("schedule") else None,
            "next run (UTC)": next_run_text(v),
            "created_at": short_time(v["created_at"]),
        }
        for v in listed
    ]
    names = ["name", "strategy", "key", "columns", "sources", "sample_size", "schedule", "next run (UTC)", "created_at"]
    out.show(rows(names, summary, title="views", whole=("name",)))


@command(view, "show")
@click.argument("name")
def view_show(client: Client, out: Output, name: str) -> None:
    """One view's definition: columns, key, each site's query, settings."""
    found = client.get(f"/v1/views/{name}")
    out.json(found) if out.as_json else out.show(view_fields(f"view {name}", found))


@command(view, "set")
@click.argument("name")
@EVERY_S
@click.option("--no-schedule", is_flag=True, help="Remove the view's schedule: it syncs only when asked.")
@click.option(
    "--sample-size", type=click.IntRange(min=0), help="Keep a uniform random sample of this many rows (0: none)."
)
def view_set(
    client: Client, out: Output, name: str, every_s: int | None, no_schedule: bool, sample_size: int | None
) -> None:
    """Change settings of view NAME that keep its rows, version and sync history (PATCH): its
    schedule, its sample's size (the next sync resizes it). What is not given is kept; then
    the view is printed."""
    if every_s is not None and no_schedule:
        raise click.UsageError("--every-s and --no-schedule contradict each other: give one")
    body: dict = {}
    if every_s is not None or no_schedule:
        body["schedule"] = {"every_s": every_s} if every_s is not None else None
    if sample_size is not None:
        body["sample_size"] = sample_size
    if not body:
        raise click.UsageError("nothing to change: give --every-s N, --no-schedule or --sample-size N")
    changed = client.patch(f"/v1/views/{name}", body)
    out.json(changed) if out.as_json else out.show(view_fields(f"view {name}", changed))


@command(view, "rm")
@click.argument("name")
def view_rm(client: Client, out: Output, name: str) -> None:
    """Remove view NAME with its rows and sync history (refused while a sync runs)."""
    client.delete(f"/v1/views/{name}")
    out.json({"name": name, "deleted": True}) if out.as_json else out.note(f"view {name} removed")


# -- syncs ------------------------------------------------------------------------------
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


@command(cli, "sync")
@click.argument("view_name", metavar="VIEW")
@click.option("--verify", is_flag=True, help="Audit mode: also read every site query in full and compare.")
@click.option("--no-wait", is_flag=True, help="Start the sync and print its id; do not follow it.")
def sync(client: Client, out: Output, view_name: str, verify: bool, no_wait: bool) -> None:
    """Start a sync of VIEW (the first one loads it) and follow it to its end with a progress
    bar; then print its summary (--json: the finished record). Exit status 1 when the sync fails."""
    params = {"mode": "verify"} if verify else {}
    queued = client.post(f"/v1/views/{view_name}/syncs", **params)
    if no_wait:
        if out.as_json:
            return out.json(queued)
        out.show(queued["id"])
        return out.note(f"sync queued; follow it with: deltasieve watch {view_name}")
    finish(out, follow_to_end(client, out, view_name, queued["id"], stream=False))


@command(cli, "watch")
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


@command(cli, "syncs")
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
        }
        for key, label in SYNCS_COLUMNS:
            value = metrics.get(key)
            line[label] = human_bytes(value) if key.startswith("bytes") and value is not None else value
        line["error"] = record.get("error")
        table.append(line)
    names = ["id", "status", "trigger", "started", *(label for _, label in SYNCS_COLUMNS), "error"]
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


def short_time(iso: str | None) -> str | None:
    """An ISO 8601 time to the second, without the zone (the service's are UTC).

    >>> short_time("2026-11-26T18:35:17.816+00:00")
    '2026-11-26 18:35:17'
    """
    return iso[:19].replace("T", " ") if iso else None


# -- data -------------------------------------------------------------------------------
FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(formats.FORMATS),
    default="ndjson",
    show_default=True,
    help="ndjson as the service sends it; csv and parquet converted here (pyarrow).",
)
WITH_BEFORE = click.option(
    "--with-before", is_flag=True, help="Give each update the row it replaced (before; see README for the cost)."
)
OUTPUT = click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file (default: stdout)."
)


def export(client: Client, out: Output, path: str, fmt: str, target: Path | None, convert, **params) -> Headers:
    """Copy an NDJSON answer to stdout or a file, as it is or converted by `convert`; its headers."""
    if fmt == "parquet" and target is None and sys.stdout.isatty():
        raise click.UsageError("parquet is binary: write it to a file with -o FILE (or pipe it)")
    sink = open(target, "wb") if target is not None else sys.stdout.buffer  # noqa: SIM115
    try:
        with client.stream(path, **params) as (lines, headers):
            if fmt == "ndjson":
                count = 0
                for line in lines:
                    sink.write(line.encode() + b"\n")
                    count += 1
            else:
                count = convert((json.loads(line) for line in lines), fmt, sink)
        sink.flush()
    except BrokenPipeError:
        stdout_gone()
    finally:
        if target is not None:
            sink.close()
    if target is not None:
        if out.as_json:
            out.json({"file": str(target), "format": fmt, "records": count})
        else:
            out.note(f"wrote {count:,} records to {target} ({fmt})")
    return headers


def pick_sync(client: Client, view: str, given: str | None) -> str:
    """The id of the sync `given` names (an id or a unique prefix), or of the view's last succeeded one."""
    listed = client.get(f"/v1/views/{view}/syncs")
    if given is None:
        for record in listed:
            if record["status"] == "succeeded":
                return record["id"]
        raise NoSync(f"view {view} has no succeeded sync yet: run deltasieve sync {view}")
    matches = [record["id"] for record in listed if record["id"].startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise NoSync(f"{given!r} is the start of {len(matches)} sync ids of view {view}: give more of it")
    return given  # the service's 404 says it is unknown


@command(cli, "delta")
@click.argument("view_name", metavar="VIEW")
@click.argument("sync_id", metavar="[SYNC]", required=False)
@FORMAT
@OUTPUT
@WITH_BEFORE
def delta(
    client: Client, out: Output, view_name: str, sync_id: str | None, fmt: str, output: Path | None, with_before: bool
) -> None:
    """The delta of a sync of VIEW (SYNC: its id or the start of it; default: the last succeeded one), one line
    per changed row: op (insert, update, delete) and the row. In csv and parquet, `op` is a
    column beside the row's, `count` and `old.COLUMN` too for views without a key, and
    `before.COLUMN` with --with-before."""
    sync_id = pick_sync(client, view_name, sync_id)
    convert = delta_converter(client, view_name, fmt, feed=False, with_before=with_before)
    params = {"with_before": "true"} if with_before else {}
    export(client, out, f"/v1/views/{view_name}/syncs/{sync_id}/delta", fmt, output, convert, **params)


def delta_converter(client: Client, view_name: str, fmt: str, *, feed: bool, with_before: bool):
    """`export`'s conversion of delta (or change feed) lines to csv or parquet, typed by the view's columns."""
    definition = client.get(f"/v1/views/{view_name}") if fmt != "ndjson" else None

    def convert(lines, fmt, sink):
        columns = formats.delta_columns(definition, feed=feed, with_before=with_before)
        optional = [formats.COUNT, *(name for name, _ in columns if name.startswith(formats.OLD_PREFIX))]
        return formats.write(
            map(formats.flat_delta, lines), columns, fmt, sink, optional=optional, defaults={formats.COUNT: 1}
        )

    return convert


#: Seconds `deltasieve changes --follow` waits between calls when it has caught up.
FOLLOW_POLL_S = 3.0


def resume_point(headers: Headers, after: str | None) -> dict:
    """Where a reader of the change feed goes on from: the answer's X-Last-Sync (the `after`
    given when the answer has none), the syncs it held, whether more are waiting."""
    return {
        "last_sync": headers.get("x-last-sync") or after,
        "syncs": int(headers.get("x-syncs") or 0),
        "more_syncs": headers.get("x-more-syncs") == "true",
    }


def report_resume(out: Output, view_name: str, resume: dict) -> None:
    """The resume point on stderr: a JSON object (--json), or a line for people."""
    if out.as_json:
        return out.json_err(resume)
    if resume["last_sync"] is None:
        return out.note(f"view {view_name} has no succeeded sync yet: call again without --after")
    more = "; more are waiting: call again" if resume["more_syncs"] else ""
    out.note(
        f"{resume['syncs']:,} syncs{more}; resume with: deltasieve changes {view_name} --after {resume['last_sync']}"
    )


@command(cli, "changes")
@click.argument("view_name", metavar="VIEW")
@click.option("--after", metavar="SYNC", help="A sync of VIEW (its id or the start of it); default: from its load.")
@click.option("--limit-syncs", type=click.IntRange(min=1), metavar="N", help="At most N syncs, the oldest first.")
@WITH_BEFORE
@FORMAT
@OUTPUT
@click.option(
    "--follow",
    is_flag=True,
    help=f"ndjson only: keep reading, every {FOLLOW_POLL_S:g} s, from where the last answer ended, until Ctrl-C.",
)
def changes(
    client: Client,
    out: Output,
    view_name: str,
    after: str | None,
    limit_syncs: int | None,
    with_before: bool,
    fmt: str,
    output: Path | None,
    follow: bool,
) -> None:
    """The change feed of VIEW: the deltas of its succeeded syncs after SYNC, oldest first,
    each line tagged with its sync ({"sync", "op", "row"}); csv and parquet as for `delta`,
    with a `sync` column first. Then, on stderr, where to resume: the last sync included
    (X-Last-Sync), the --after of the next call (with --json, as a JSON object, so stdout
    holds only the data)."""
    if follow and fmt != "ndjson":
        raise click.UsageError("--follow writes a stream: only with --format ndjson")
    if after is not None:
        after = pick_sync(client, view_name, after)
    params = {"after": after, "limit_syncs": limit_syncs, "with_before": "true" if with_before else None}
    params = {k: v for k, v in params.items() if v is not None}
    path = f"/v1/views/{view_name}/changes"
    if follow:
        return follow_changes(client, out, view_name, path, output, params)
    convert = delta_converter(client, view_name, fmt, feed=True, with_before=with_before)
    report_resume(out, view_name, resume_point(export(client, out, path, fmt, output, convert, **params), after))


def follow_changes(client: Client, out: Output, view_name: str, path: str, target: Path | None, params: dict) -> None:
    """`changes --follow`: call the feed again and again, each time after the last sync the
    previous answer held, appending its lines to stdout or `target`; the resume point on stderr
    after every answer that brought syncs, and at Ctrl-C (exit 130). Lines of a sync cut short
    by Ctrl-C come again from that resume point."""
    sink = open(target, "ab") if target is not None else sys.stdout.buffer  # noqa: SIM115
    resume = {"last_sync": params.get("after"), "syncs": 0, "more_syncs": False}
    try:
        while True:
            with client.stream(path, **params) as (lines, headers):
                for line in lines:
                    sink.write(line.encode() + b"\n")
            sink.flush()
            resume = resume_point(headers, params.get("after"))
            if resume["last_sync"] is not None:
                params["after"] = resume["last_sync"]
            if resume["syncs"]:
                report_resume(out, view_name, resume)
            if not resume["more_syncs"]:
                time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        report_resume(out, view_name, {**resume, "syncs": 0, "more_syncs": False})
        raise click.exceptions.Exit(130) from None
    except BrokenPipeError:
        stdout_gone()
    finally:
        if target is not None:
            sink.close()


@command(cli, "rows")
@click.argument("view_name", metavar="VIEW")
@FORMAT
@OUTPUT
def rows_(client: Client, out: Output, view_name: str, fmt: str, output: Path | None) -> None:
    """The rows of VIEW as of its last succeeded sync."""
    definition = client.get(f"/v1/views/{view_name}") if fmt != "ndjson" else None

    def convert(lines, fmt, sink):
        return formats.write(lines, formats.row_columns(definition), fmt, sink)

    export(client, out, f"/v1/views/{view_name}/rows", fmt, output, convert)


@command(cli, "stats")
@click.argument("view_name", metavar="VIEW")
def stats(client: Client, out: Output, view_name: str) -> None:
    """The update and deletion statistics of VIEW, per site (and its sample's state)."""
    found = client.get(f"/v1/views/{view_name}/statistics")
    if out.as_json:
        return out.json(found)
    out.show(fields(f"statistics of {view_name}", {k: v for k, v in found.items() if k != "sites"}))
    for i, site in enumerate(found.get("sites", [])):
        out.show(fields(f"site {i}: {site.get('source')}", readable_site_statistics(site)))


def readable_site_statistics(site: dict) -> dict:
    """A site's statistics for people: the P(update) histogram drawn, the deletions per sync counted."""
    shown = json.loads(json.dumps(site))
    histogram = shown.get("update_statistics", {}).get("update_probability_histogram")
    if isinstance(histogram, dict) and isinstance(histogram.get("counts"), list):
        counts = histogram["counts"]
        histogram["counts"] = f"{sparkline(counts)}  {cell_list(counts)}"
    deletions = shown.get("deletion_statistics", {})
    if isinstance(deletions.get("syncs"), list):
        per_sync = deletions["syncs"]
        deletions["syncs"] = f"{len(per_sync)} (rows deleted: {sum(d.get('dno', 0) for d in per_sync):,})"
    return shown


def cell_list(values: list) -> str:
    return " ".join(f"{v:,}" for v in values)


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="deltasieve")
