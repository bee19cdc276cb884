"""`deltasieve delta`, `changes` and `rows`: a view's data out, as NDJSON, CSV or Parquet."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from httpx import Headers

from deltasieve_cli import formats
from deltasieve_cli.client import Client
from deltasieve_cli.commands import command
from deltasieve_cli.errors import NoSync, SchemaChanged
from deltasieve_cli.render import Output, stdout_gone

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
                count = convert((json.loads(line) for line in lines), fmt, sink, headers)
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


@command(None, "delta")
@click.argument("view_name", metavar="VIEW")
@click.argument("sync_id", metavar="[SYNC]", required=False)
@FORMAT
@OUTPUT
@WITH_BEFORE
def delta(
    client: Client, out: Output, view_name: str, sync_id: str | None, fmt: str, output: Path | None, with_before: bool
) -> None:
    """The delta of a sync of VIEW (SYNC: its id or the start of it; default: the last succeeded one), one line
    per changed row: op (insert, update, delete) and the row, and on updates `changed`, the
    columns the update changed. In csv and parquet, `op` is a column beside the row's,
    `changed` too (parquet: a list; csv: the names joined by "|"), `count` and `old.COLUMN`
    for views without a key, and `before.COLUMN` with --with-before."""
    sync_id = pick_sync(client, view_name, sync_id)
    convert = delta_converter(client, view_name, fmt, feed=False, with_before=with_before)
    params = {"with_before": "true"} if with_before else {}
    export(client, out, f"/v1/views/{view_name}/syncs/{sync_id}/delta", fmt, output, convert, **params)


def answered(view: dict | None, headers: Headers) -> dict:
    """The view's columns as the answer has them (its X-Columns header: after a redefinition
    not yet applied they are the old ones), else as GET /v1/views/{name} shows them."""
    assert view is not None, "a conversion reads the view first"
    given = headers.get("x-columns")
    if not given:  # an older service
        return view
    columns = json.loads(given)
    return {**view, "columns": [c["name"] for c in columns], "column_types": {c["name"]: c["type"] for c in columns}}


def succeeded_between(client: Client, view: str, after: str | None, until: str) -> list[str]:
    """The view's succeeded syncs after `after` (from its first without) and before `until`, oldest first."""
    listed = list(reversed(client.get(f"/v1/views/{view}/syncs")))
    ids = [record["id"] for record in listed]
    first = ids.index(after) + 1 if after in ids else 0
    last = ids.index(until) if until in ids else len(ids)
    return [record["id"] for record in listed[first:last] if record["status"] == "succeeded"]


def delta_converter(
    client: Client, view_name: str, fmt: str, *, feed: bool, with_before: bool, after: str | None = None
):
    """`export`'s conversion of delta (or change feed) lines to csv or parquet, typed by the
    columns the answer says its lines have; lines spanning a redefinition (a schema line)
    are refused (SchemaChanged)."""
    definition = client.get(f"/v1/views/{view_name}") if fmt != "ndjson" else None

    def one_schema(lines):
        for line in lines:
            if line.get("op") == "schema":
                before = succeeded_between(client, view_name, after, line["sync"]) if feed else []
                raise SchemaChanged(view_name, line["sync"], before, after, feed)
            yield line

    def convert(lines, fmt, sink, headers):
        columns = formats.delta_columns(answered(definition, headers), feed=feed, with_before=with_before)
        optional = [formats.COUNT, formats.CHANGED, *(n for n, _ in columns if n.startswith(formats.OLD_PREFIX))]
        return formats.write(
            map(formats.flat_delta, one_schema(lines)),
            columns,
            fmt,
            sink,
            optional=optional,
            defaults={formats.COUNT: 1},
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


@command(None, "changes")
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
    convert = delta_converter(client, view_name, fmt, feed=True, with_before=with_before, after=after)
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


@command(None, "rows")
@click.argument("view_name", metavar="VIEW")
@FORMAT
@OUTPUT
def rows_(client: Client, out: Output, view_name: str, fmt: str, output: Path | None) -> None:
    """The rows of VIEW as of its last succeeded sync."""
    definition = client.get(f"/v1/views/{view_name}") if fmt != "ndjson" else None

    def convert(lines, fmt, sink, headers):
        return formats.write(lines, formats.row_columns(answered(definition, headers)), fmt, sink)

    export(client, out, f"/v1/views/{view_name}/rows", fmt, output, convert)
