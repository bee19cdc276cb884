"""`deltasieve view` and `deltasieve stats`: the views' definitions, settings and statistics."""

from __future__ import annotations

import json

import click

from deltasieve_cli.client import Client
from deltasieve_cli.commands import CONTEXT, command, short_time
from deltasieve_cli.render import Output, fields, rows, sparkline


@click.group(context_settings=CONTEXT)
def view() -> None:
    """Views kept in step with their sources (POST/GET/PUT/PATCH/DELETE /v1/views)."""


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


#: `view add` and `view set`: what a sync does when a column the view reads changed at its source.
ON_SCHEMA_CHANGE = click.option(
    "--on-schema-change",
    type=click.Choice(["evolve", "freeze"]),
    help="When a column the view reads changes type at its source: evolve (the default) takes a lossless "
    "widening such as numeric(14,2) to numeric(16,4) in place, no reload, and fails the sync on anything else; "
    "freeze fails the sync on every change.",
)
#: `view add` and `view set`: the view's schedule (the service checks the range, 1 s to a year).
EVERY_S = click.option(
    "--every-s",
    type=click.IntRange(min=1),
    metavar="N",
    help="Have the service sync the view by itself, N seconds after its last sync ended.",
)


def destination(text: str) -> dict | None:
    """One --destination value as the API takes it: delta, delta:URI, a JSON object, or none.

    >>> destination("delta"), destination("delta:/lake/orders"), destination("none")
    ({'kind': 'delta'}, {'kind': 'delta', 'uri': '/lake/orders'}, None)
    >>> destination('{"kind": "postgres", "url": "postgresql://me@db/wh", "table": "bi.orders"}')["table"]
    'bi.orders'
    """
    if text.startswith("{"):
        try:
            given = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"{text!r} is not a JSON object: {exc}") from None
        if not isinstance(given, dict):
            raise click.BadParameter(f"{text!r} is not a JSON object")
        return given
    if text == "none":
        return None
    kind, sep, uri = text.partition(":")
    if kind != "delta" or (sep and not uri):
        raise click.BadParameter(
            f"{text!r}: give delta, delta:URI, none, or a JSON object such as "
            '{"kind": "postgres", "url": "postgresql://...", "table": "SCHEMA.TABLE"}'
        )
    return {"kind": "delta", "uri": uri} if uri else {"kind": "delta"}


def destinations_of(ctx, param, values: tuple[str, ...]) -> list[dict] | None:
    """A click callback: the repeated --destination values as the API's list (None: not given)."""
    if not values:
        return None
    parsed = [destination(v) for v in values]
    return [d for d in parsed if d is not None]


#: `view add`, `view redefine` and `view set`: where the view is published.
DESTINATION = click.option(
    "--destination",
    "destinations",
    multiple=True,
    metavar="WHERE",
    callback=destinations_of,
    help="Publish the view after each sync that changed it (repeatable): delta (a Delta Lake table at "
    "DATA_DIR/tables/NAME, what a new view gets when none is given), delta:URI (a Delta table elsewhere), "
    'a JSON object such as {"kind": "postgres", "url": "postgresql://...", "table": "SCHEMA.TABLE"} or '
    '{"kind": "iceberg", "table": "NAMESPACE.TABLE"}, or none (publish nothing).',
)


def definition_options(verb: str):
    """The options `view add` and `view redefine` share: how syncs find changes, the sample,
    the strategy's settings, the schedule. `verb`: what a left-out option means."""
    options = [
        click.option("--strategy", help=f"How syncs find changes: auto, sketch, group_hash, … ({verb})."),
        click.option(
            "--sample-size", type=click.IntRange(min=0), help="Keep a uniform random sample of this many rows."
        ),
        click.option(
            "--timestamp",
            "timestamps",
            multiple=True,
            metavar="TABLE=COLUMN",
            callback=pairs(),
            help="A table's last-modified column (strategy timestamp); repeatable.",
        ),
        click.option(
            "--delete-flag",
            "delete_flags",
            multiple=True,
            metavar="TABLE=COLUMN",
            callback=pairs(),
            help="A table's soft-delete marker; repeatable.",
        ),
        click.option(
            "--column-type",
            "column_types",
            multiple=True,
            metavar="TABLE.COLUMN=TYPE",
            callback=pairs(),
            help="Read a column as a stronger type than its source declares, e.g. orders.updated_at=timestamp for "
            "ISO text (source.table.column where the table is in several sources); checked on a sample; repeatable.",
        ),
        click.option("--timestamp-lag-s", type=click.FloatRange(min=0), help="Seconds read before the last watermark."),
        click.option("--reconcile-every", type=click.IntRange(min=1), help="Syncs between full reconciliations."),
        click.option(
            "--diff-algorithm",
            type=click.Choice(["window", "sort_merge", "partitioned_hash"]),
            help="snapshot_diff: how the agent compares two dumps.",
        ),
        click.option("--aging-rows", type=click.IntRange(min=1), help="snapshot_diff: records per aging buffer."),
        click.option("--block-rows", type=click.IntRange(min=1), help="snapshot_diff: records read at a time."),
        click.option(
            "--match-order-by", metavar="COLUMN", help="Keyless views: pair vanished and appeared rows along this."
        ),
        click.option(
            "--match-epsilon",
            multiple=True,
            metavar="COLUMN=NUMBER",
            callback=pairs(float),
            help="Keyless views: how far a pair may differ in COLUMN; repeatable.",
        ),
        EVERY_S,
        ON_SCHEMA_CHANGE,
        DESTINATION,
    ]

    def apply(f):
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def definition_body(sql: str | None, table: str | None, options: dict) -> dict:
    """The JSON body of a view's definition from the options given (left out: not sent):
    by SQL or, a table view, by its table (exactly one of the two)."""
    if (sql is None) == (table is None):
        raise click.UsageError("give the view's SQL or --table SOURCE.TABLE (one of the two)")
    body: dict[str, object] = {"sql": sql} if sql is not None else {"table": table}
    settings = ("strategy", "sample_size", "timestamps", "delete_flags", "column_types", "on_schema_change")
    for key in (*settings, "timestamp_lag_s", "reconcile_every"):
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
    if options["destinations"] is not None:
        body["destinations"] = options["destinations"]
    return body


@command(view, "add")
@click.argument("name")
@click.argument("sql", required=False)
@click.option(
    "--table",
    metavar="SOURCE.TABLE",
    help="A table view instead of SQL: every column of this table (SOURCE.SCHEMA.TABLE outside the default schema), "
    "keyed by its primary key, else a unique key over NOT NULL columns, else none (a multiset view).",
)
@definition_options("the service's default: auto")
def view_add(client: Client, out: Output, name: str, sql: str | None, table: str | None, **options) -> None:
    """Define view NAME by SQL, a project-select-join over source.table (source.schema.table outside
    the default schema; the service checks it and says what it cannot maintain), or by --table as
    every column of one table. The view's key is derived from its tables' keys."""
    created = client.post("/v1/views", {"name": name, **definition_body(sql, table, options)})
    if out.as_json:
        return out.json(created)
    out.show(view_fields(f"view {name} added", created))
    out.note(f"load it with: deltasieve sync {name}")


@command(view, "redefine")
@click.argument("name")
@click.option("--sql", help="The view's new SQL (checked against the sources now).")
@click.option(
    "--table",
    metavar="SOURCE.TABLE",
    help="A table view instead of SQL: every column of this table (SOURCE.SCHEMA.TABLE outside the default schema), "
    "keyed by its primary key, else a unique key over NOT NULL columns, else none (a multiset view).",
)
@definition_options("left out: the one the view has")
def view_redefine(client: Client, out: Output, name: str, sql: str | None, table: str | None, **options) -> None:
    """Give view NAME a new SQL (--sql) or table (--table) by PUT, keeping its sync history, the statistics of the keys
    that survive and every change-feed reader's position. The new definition is stored at
    once; the rows keep the old one until the view's next sync applies it (trigger
    "redefine"): dropped columns are projected from the stored rows without reading the
    source, anything else reads the new definition in full. That sync's delta starts with a
    "schema" line, followed by the exact difference (of a view without a key: lines with
    counts). A view that gains or loses its key is loaded afresh, its history gone. Options
    left out keep their values."""
    changed = client.put(f"/v1/views/{name}", definition_body(sql, table, options))
    if out.as_json:
        return out.json(changed)
    out.show(view_fields(f"view {name} redefined", changed))
    if changed.get("redefinition_pending"):
        out.note(f"its next sync applies it: deltasieve sync {name}")


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
    hidden = ("sites", "column_types", "key_derivation", "columns", "schedule", "next_run_at", "destinations")
    shown = {k: v for k, v in view.items() if k not in hidden and not (k == "table" and v is None)}
    shown["schedule"] = schedule_text(view)
    if view.get("schedule"):
        shown["next run (UTC)"] = next_run_text(view) or "after the sync under way (or the scheduler is off)"
    shown["columns"] = ", ".join(f"{c} {view.get('column_types', {}).get(c, '')}".strip() for c in view["columns"])
    shown["key"] = ", ".join(view["key"])
    for i, site in enumerate(view["sites"]):
        shown[f"site {i} ({site['source']})"] = site["sql"]
    for i, published in enumerate(view.get("destinations", [])):
        shown[f"destination {i} ({published['kind']})"] = destination_text(published)
    if not view.get("destinations"):
        shown["destinations"] = "none"
    return fields(title, shown)


def destination_text(published: dict) -> str:
    """Where a destination is and how far it has caught up, for people.

    >>> destination_text({"kind": "delta", "uri": "/t/v", "applied_sync": "s1", "lag_syncs": 2, "error": None})
    '/t/v: applied s1, 2 syncs behind'
    >>> destination_text({"kind": "postgres", "url": "postgresql://u:***@h/db", "table": "a.b", "applied_sync": "s1", "lag_syncs": 0, "error": None})
    'a.b at postgresql://u:***@h/db: applied s1, caught up'
    >>> destination_text({"kind": "iceberg", "catalog": {"type": "embedded"}, "table": "wh.v", "lag_syncs": 0})
    'wh.v in the embedded iceberg catalog: applied nothing yet, caught up'
    >>> destination_text({"kind": "delta", "uri": "/t/v", "mode": "history", "applied_sync": "s1", "lag_syncs": 0})
    '/t/v (history): applied s1, caught up'
    """
    where = published.get("uri") or f"{published.get('table')} at {published.get('url')}"
    if published.get("kind") == "iceberg":
        catalog = published.get("catalog") or {}
        at = f" at {catalog['uri']}" if catalog.get("uri") else ""
        where = f"{published.get('table')} in the {catalog.get('type')} iceberg catalog{at}"
    if published.get("mode", "merge") != "merge":
        where += f" ({published['mode']})"
    lag = published.get("lag_syncs", 0)
    state = "caught up" if not lag else f"{lag} sync{'s' if lag > 1 else ''} behind"
    text = f"{where}: applied {published.get('applied_sync') or 'nothing yet'}, {state}"
    return text + (f"; last error: {published['error']}" if published.get("error") else "")


def published_text(view: dict) -> str | None:
    """A view's destinations in a word: their kinds, and the largest lag.

    >>> published_text({"destinations": [{"kind": "delta", "lag_syncs": 0}]}), published_text({"destinations": []})
    ('delta', None)
    >>> published_text({"destinations": [{"kind": "delta", "lag_syncs": 0}, {"kind": "postgres", "lag_syncs": 3}]})
    'delta, postgres (3 behind)'
    """
    destinations = view.get("destinations") or []
    if not destinations:
        return None
    lag = max(d.get("lag_syncs", 0) for d in destinations)
    return ", ".join(d["kind"] for d in destinations) + (f" ({lag} behind)" if lag else "")


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
            "published": published_text(v),
            "schedule": schedule_text(v) if v.get("schedule") else None,
            "next run (UTC)": next_run_text(v),
            # how fresh its rows are: the start of its last succeeded sync
            "data as of (UTC)": short_time(v["data_as_of"]) if v.get("data_as_of") else "no data",
            "created_at": short_time(v["created_at"]),
        }
        for v in listed
    ]
    names = ["name", "strategy", "key", "columns", "sources", "sample_size", "published", "schedule", "next run (UTC)"]
    names += ["data as of (UTC)", "created_at"]
    out.show(rows(names, summary, title="views", whole=("name",)))


@command(view, "show")
@click.argument("name")
def view_show(client: Client, out: Output, name: str) -> None:
    """One view's definition: columns, key, each site's query, settings, and its destinations
    with the sync each holds and how many changing syncs it lags behind."""
    found = client.get(f"/v1/views/{name}")
    out.json(found) if out.as_json else out.show(view_fields(f"view {name}", found))


@command(view, "set")
@click.argument("name")
@EVERY_S
@click.option("--no-schedule", is_flag=True, help="Remove the view's schedule: it syncs only when asked.")
@click.option(
    "--sample-size", type=click.IntRange(min=0), help="Keep a uniform random sample of this many rows (0: none)."
)
@ON_SCHEMA_CHANGE
@DESTINATION
def view_set(
    client: Client,
    out: Output,
    name: str,
    every_s: int | None,
    no_schedule: bool,
    sample_size: int | None,
    on_schema_change: str | None,
    destinations: list[dict] | None,
) -> None:
    """Change settings of view NAME that keep its rows, version and sync history (PATCH): its
    schedule, its sample's size (the next sync resizes it), its schema policy. What is not
    given is kept; then the view is printed."""
    if every_s is not None and no_schedule:
        raise click.UsageError("--every-s and --no-schedule contradict each other: give one")
    body: dict = {}
    if every_s is not None or no_schedule:
        body["schedule"] = {"every_s": every_s} if every_s is not None else None
    if sample_size is not None:
        body["sample_size"] = sample_size
    if on_schema_change is not None:
        body["on_schema_change"] = on_schema_change
    if destinations is not None:
        body["destinations"] = destinations
    if not body:
        raise click.UsageError(
            "nothing to change: give --every-s N, --no-schedule, --sample-size N, --on-schema-change POLICY "
            "or --destination WHERE"
        )
    changed = client.patch(f"/v1/views/{name}", body)
    out.json(changed) if out.as_json else out.show(view_fields(f"view {name}", changed))


@command(view, "rm")
@click.argument("name")
def view_rm(client: Client, out: Output, name: str) -> None:
    """Remove view NAME with its rows and sync history (refused while a sync runs)."""
    client.delete(f"/v1/views/{name}")
    out.json({"name": name, "deleted": True}) if out.as_json else out.note(f"view {name} removed")


@command(None, "stats")
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
