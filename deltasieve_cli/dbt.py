"""`deltasieve dbt sources`: a dbt sources file (sources.yml) for the tables the views are published to.

One dbt source per place the tables are in: the views' Delta tables (each an external
location, `external.location` with `using: delta` as dbt-external-tables and Spark read it,
and `config.external_location` as dbt-duckdb reads it), and for PostgreSQL one source per
database and schema (its tables by name, `identifier` the table's). Each table is a view's:
its columns with their types and the key marked in their descriptions, the load-metadata
columns every destination mode adds (`_deltasieve_synced_at`, `_deltasieve_sync_id`, under the
names the destination gives them), `not_null` tests on the key (and `unique` on a key of one
column where the table holds one row per key), and source freshness on the synced-at column:
warn after two intervals of the view's schedule and fail after four (a sync missed, then
three), or, for a view without a schedule, after DEFAULT_WARN and DEFAULT_ERROR; the command's
options set both for every table.

The file is written as dbt 1.10 and later read sources (freshness, loaded_at_field and meta
under each table's `config`). It reads only what the service's API shows (GET /v1/views).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import click
import yaml

from deltasieve_cli.client import Client
from deltasieve_cli.commands import CONTEXT, command
from deltasieve_cli.render import Output

#: The column every destination mode writes with the commit time of the sync that last wrote the row.
SYNCED_AT = "_deltasieve_synced_at"
#: The column with that sync's id.
SYNC_ID = "_deltasieve_sync_id"
#: What the other load-metadata columns of each mode say (their default names; a destination
#: may rename them, and the names it gives are taken from its `columns`).
MODE_COLUMNS = {
    "merge": {},
    "soft_delete": {
        "deleted": ("_deltasieve_deleted", "whether the row was deleted from the view (it stays, flagged)"),
        "deleted_at": (
            "_deltasieve_deleted_at",
            "when the sync that saw the row gone committed (UTC); null while live",
        ),
    },
    "history": {
        "valid_from": ("_deltasieve_valid_from", "when this version of the row appeared (its sync's commit, UTC)"),
        "valid_to": ("_deltasieve_valid_to", "when it was replaced or deleted (UTC); null while current"),
        "current": ("_deltasieve_current", "whether this is the row's current version"),
    },
}
#: Freshness of a view without a schedule: dbt's own examples' thresholds.
DEFAULT_WARN = {"count": 12, "period": "hour"}
DEFAULT_ERROR = {"count": 24, "period": "hour"}
#: How many intervals of a view's schedule without a new change before dbt warns, and before it fails.
WARN_INTERVALS, ERROR_INTERVALS = 2, 4

_PERIODS = {"m": "minute", "h": "hour", "d": "day"}


def duration(text: str) -> dict:
    """A freshness threshold given as COUNT and m, h or d, as dbt writes it.

    >>> duration("30m"), duration("12h"), duration("2d")
    ({'count': 30, 'period': 'minute'}, {'count': 12, 'period': 'hour'}, {'count': 2, 'period': 'day'})
    """
    match = re.fullmatch(r"\s*([1-9][0-9]*)\s*([mhd])\s*", text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 30m, 12h or 2d")
    return {"count": int(match.group(1)), "period": _PERIODS[match.group(2)]}


def threshold(seconds: int) -> dict:
    """`seconds` as a dbt freshness threshold: whole days or hours when it is, else minutes (rounded up).

    >>> threshold(7200), threshold(172800), threshold(90)
    ({'count': 2, 'period': 'hour'}, {'count': 2, 'period': 'day'}, {'count': 2, 'period': 'minute'})
    """
    if seconds % 86400 == 0:
        return {"count": seconds // 86400, "period": "day"}
    if seconds % 3600 == 0:
        return {"count": seconds // 3600, "period": "hour"}
    return {"count": -(-seconds // 60), "period": "minute"}


def freshness(view: dict, warn: dict | None = None, error: dict | None = None) -> dict:
    """A table's freshness: `warn` and `error` when given, else from the view's schedule, else the defaults.

    >>> freshness({"schedule": {"every_s": 900}})
    {'warn_after': {'count': 30, 'period': 'minute'}, 'error_after': {'count': 1, 'period': 'hour'}}
    >>> freshness({"schedule": None}, warn={"count": 1, "period": "day"})["warn_after"]
    {'count': 1, 'period': 'day'}
    """
    every_s = (view.get("schedule") or {}).get("every_s")
    if every_s:
        derived = threshold(WARN_INTERVALS * every_s), threshold(ERROR_INTERVALS * every_s)
    else:
        derived = DEFAULT_WARN, DEFAULT_ERROR
    return {"warn_after": warn or derived[0], "error_after": error or derived[1]}


def columns(view: dict, destination: dict, tests: bool) -> list[dict]:
    """The table's columns in dbt's terms: the view's (type and key in the description), then
    the load-metadata columns of the destination's mode.

    >>> view = {"columns": ["id", "name"], "column_types": {"id": "int", "name": "text"}, "key": ["id"]}
    >>> [(c["name"], c["description"], c.get("data_tests")) for c in columns(view, {"kind": "delta"}, True)][:2]
    [('id', 'key column, int', ['not_null', 'unique']), ('name', 'text', None)]
    >>> [c["name"] for c in columns(view, {"kind": "delta", "mode": "history"}, True)][2:]
    ['_deltasieve_synced_at', '_deltasieve_sync_id', '_deltasieve_valid_from', '_deltasieve_valid_to', '_deltasieve_current']
    """
    key = view.get("key") or []
    mode = destination.get("mode") or "merge"
    out = []
    for name in view["columns"]:
        kind = view.get("column_types", {}).get(name, "")
        column: dict = {"name": name, "description": f"key column, {kind}" if name in key else kind}
        if tests and name in key:
            # one row per key in merge and soft_delete tables; a history table has one per version
            unique = len(key) == 1 and mode != "history"
            column["data_tests"] = ["not_null", "unique"] if unique else ["not_null"]
        out.append(column)
    names = destination.get("columns") or {}
    metadata = {
        "synced_at": (SYNCED_AT, "when the sync that last wrote the row committed (UTC)"),
        "sync_id": (SYNC_ID, "the id of the sync that last wrote the row"),
        **MODE_COLUMNS.get(mode, {}),
    }
    out += [{"name": names.get(field, name), "description": what} for field, (name, what) in metadata.items()]
    return out


def synced_at(destination: dict) -> str:
    """The name of the destination's synced-at column.

    >>> synced_at({"kind": "delta"}), synced_at({"kind": "delta", "columns": {"synced_at": "_fivetran_synced"}})
    ('_deltasieve_synced_at', '_fivetran_synced')
    """
    return (destination.get("columns") or {}).get("synced_at", SYNCED_AT)


def _table(view: dict, destination: dict, name: str, tests: bool, warn: dict | None, error: dict | None) -> dict:
    meta = {"deltasieve_view": view["name"], "deltasieve_mode": destination.get("mode") or "merge"}
    table: dict = {"name": name, "description": f"deltasieve view {view['name']}: {_one_line(view['sql'])}"}
    if destination["kind"] == "delta":
        table["external"] = {"location": destination["uri"], "using": "delta"}
    elif destination.get("table"):
        identifier = destination["table"].rpartition(".")[2]
        if identifier != name:
            table["identifier"] = identifier
    config: dict = {"loaded_at_field": synced_at(destination), "freshness": freshness(view, warn, error)}
    if destination["kind"] == "delta":  # as dbt-duckdb reads a source's table
        config["external_location"] = f"delta_scan('{destination['uri']}')"
    table["config"] = {**config, "meta": meta}
    table["columns"] = columns(view, destination, tests)
    return table


def _one_line(sql: str) -> str:
    """
    >>> _one_line("SELECT a\\n  FROM s.t")
    'SELECT a FROM s.t'
    """
    return " ".join(sql.split())


def _source_of(destination: dict, prefix: str) -> tuple[str, dict]:
    """The dbt source a destination's table belongs to: its name and its fields but tables.

    >>> _source_of({"kind": "postgres", "url": "postgresql://u:***@wh:5432/bi", "table": "sales.orders"}, "ds")
    ('ds_bi_sales', {'database': 'bi', 'schema': 'sales', 'config': {'meta': {'deltasieve_url': 'postgresql://u:***@wh:5432/bi'}}})
    >>> _source_of({"kind": "delta", "uri": "/d/tables/v"}, "ds")
    ('ds_delta', {})
    """
    kind = destination["kind"]
    if kind == "delta":
        return f"{prefix}_delta", {}
    schema = (destination.get("table") or "").rpartition(".")[0] or "public"
    url = destination.get("url") or ""
    database = urlsplit(url).path.lstrip("/") if "://" in url else ""
    fields: dict = {"database": database} if database else {}
    fields["schema"] = schema
    if url:
        fields["config"] = {"meta": {"deltasieve_url": url}}  # the service shows it with its password masked
    name = "_".join(part for part in (prefix, database or kind, schema) if part)
    return re.sub(r"[^A-Za-z0-9_]", "_", name), fields


def sources(
    views: Iterable[dict],
    prefix: str = "deltasieve",
    tests: bool = True,
    warn: dict | None = None,
    error: dict | None = None,
) -> dict:
    """The sources document (dbt's `version: 2` properties file) for the views' destinations.

    >>> view = {"name": "orders", "sql": "SELECT o.id FROM shop.orders o", "columns": ["id"],
    ...     "column_types": {"id": "int"}, "key": ["id"], "schedule": None,
    ...     "destinations": [{"kind": "delta", "uri": "/d/tables/orders"},
    ...                      {"kind": "postgres", "url": "postgresql://wh/bi", "table": "sales.orders"}]}
    >>> doc = sources([view])
    >>> [(s["name"], [t["name"] for t in s["tables"]]) for s in doc["sources"]]
    [('deltasieve_delta', ['orders']), ('deltasieve_bi_sales', ['orders'])]
    """
    found: dict[str, dict] = {}  # each source by where its tables are (its name and fields)
    for view in sorted(views, key=lambda v: v["name"]):
        for destination in view.get("destinations") or []:
            name, fields = _source_of(destination, prefix)
            place = json.dumps([name, fields], sort_keys=True)
            source = found.get(place)
            if source is None:  # a new name for another server's database and schema of the same names
                name = _unique(name, {s["name"] for s in found.values()})
                source = found[place] = {"name": name, "description": _described(fields), **fields, "tables": []}
            table = _unique(view["name"], {t["name"] for t in source["tables"]})
            source["tables"].append(_table(view, destination, table, tests, warn, error))
    return {"version": 2, "sources": list(found.values())}


def _unique(name: str, taken) -> str:
    """`name`, or with the first free number after it.

    >>> _unique("v", {"v", "v_2"})
    'v_3'
    """
    n = 1
    out = name
    while out in taken:
        n += 1
        out = f"{name}_{n}"
    return out


def _described(fields: dict) -> str:
    """What a source holds, from its fields (_source_of)."""
    if "schema" not in fields:
        return "Delta Lake tables of deltasieve views, one per view (read at their external location)"
    where = ".".join(p for p in (fields.get("database"), fields["schema"]) if p)
    return f"PostgreSQL tables of deltasieve views in {where}"


def render(document: dict, service: str, at: dt.datetime) -> str:
    """The document as YAML, under a comment that says where it came from.

    >>> print(render({"version": 2, "sources": []}, "http://ds:8000", dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    # dbt sources of the deltasieve service at http://ds:8000, written 2026-01-01T00:00:00+00:00
    # by `deltasieve dbt sources`: write it again rather than edit it
    version: 2
    sources: []
    <BLANKLINE>
    """
    head = (
        f"# dbt sources of the deltasieve service at {service}, written {at.isoformat(timespec='seconds')}\n"
        "# by `deltasieve dbt sources`: write it again rather than edit it\n"
    )
    return head + yaml.dump(document, Dumper=_Plain, sort_keys=False, allow_unicode=True, width=120)


class _Plain(yaml.SafeDumper):
    """YAML without anchors and aliases: tables sharing a freshness are written out in full, each
    readable by itself (PyYAML would write the first `&id001` and the others `*id001`)."""

    def ignore_aliases(self, data) -> bool:
        return True


@click.group(context_settings=CONTEXT)
def dbt() -> None:
    """Files for dbt projects that read the views' published tables."""


def _threshold_option(name: str, what: str, default: dict):
    def parse(ctx, param, value: str | None) -> dict | None:
        if value is None:
            return None
        try:
            return duration(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return click.option(
        name,
        metavar="DURATION",
        callback=parse,
        help=f"{what} for every table, e.g. 30m, 12h, 2d (default: {WARN_INTERVALS if default is DEFAULT_WARN else ERROR_INTERVALS} "
        f"intervals of the view's schedule; {default['count']} {default['period']}s for a view without one).",
    )


@command(dbt, "sources")
@click.argument("names", metavar="[VIEW]...", nargs=-1)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file (default: stdout)."
)
@click.option("--prefix", default="deltasieve", show_default=True, help="The start of each dbt source's name.")
@click.option("--no-tests", is_flag=True, help="Leave out the not_null and unique tests of the key columns.")
@_threshold_option("--warn-after", "Warn when the newest change is older than this", DEFAULT_WARN)
@_threshold_option("--error-after", "Fail when the newest change is older than this", DEFAULT_ERROR)
def sources_command(
    client: Client,
    out: Output,
    names: tuple[str, ...],
    output: Path | None,
    prefix: str,
    no_tests: bool,
    warn_after: dict | None,
    error_after: dict | None,
) -> None:
    """Write a dbt sources file (sources.yml) for the published tables of the views (default: all)."""
    views = client.get("/v1/views")
    if names:
        known = {v["name"] for v in views}
        missing = [n for n in names if n not in known]
        if missing:
            raise click.BadParameter(f"no view {', '.join(missing)} at {client.url}", param_hint="VIEW")
        views = [v for v in views if v["name"] in names]
    document = sources(views, prefix, not no_tests, warn_after, error_after)
    for view in views:
        for destination in view.get("destinations") or []:
            if (
                destination["kind"] == "delta"
                and "://" not in destination["uri"]
                and not destination["uri"].startswith("/")
            ):
                out.note(
                    f"note: view {view['name']}'s Delta table is at {destination['uri']}, relative to where the service "
                    "runs: start it with an absolute --data-dir for locations dbt can read from anywhere"
                )
    if out.as_json:
        out.json(document)
        return
    text = render(document, client.url, dt.datetime.now(dt.UTC).replace(microsecond=0))
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text)
    tables = sum(len(s["tables"]) for s in document["sources"])
    out.note(f"wrote {tables} tables in {len(document['sources'])} dbt sources to {output}")
