"""`deltasieve source`: the agents the warehouse reads from."""

from __future__ import annotations

import click

from deltasieve_cli.client import Client
from deltasieve_cli.commands import CONTEXT, command, short_time
from deltasieve_cli.render import Output, fields, rows
from deltasieve_cli.views import ON_SCHEMA_CHANGE


@click.group(context_settings=CONTEXT)
def source() -> None:
    """Agents the warehouse reads from (/v1/sources)."""


SOURCE_COLUMNS = ["name", "url", "has_token", "created_at", "health"]


def health_text(source: dict) -> str:
    """A source's health for people: how its agent answered the last contact, since when.

    >>> health_text({"health": {"status": "refused", "since": "2026-11-27T04:00:00.000+00:00", "error": "agent answered 401"}})
    'refused since 2026-11-27 04:00:00: agent answered 401'
    >>> health_text({"health": None})
    'not checked yet'
    """
    health = source.get("health")
    if not health:
        return "not checked yet"
    error = f": {health['error']}" if health.get("error") else ""
    return f"{health['status']} since {short_time(health['since'])}{error}"


@command(source, "add")
@click.argument("name")
@click.argument("url")
@click.option("--token", help="The agent's bearer token (the service never shows it again).")
@click.option("--no-check", is_flag=True, help="Store the source without asking the agent for its schema first.")
def source_add(client: Client, out: Output, name: str, url: str, token: str | None, no_check: bool) -> None:
    """Register the agent at URL as source NAME (the NAME view SQL writes as NAME.table).

    The service first asks the agent for its schema: an agent that does not answer or
    refuses the token is refused with the reason (unless --no-check)."""
    created = client.post("/v1/sources", {"name": name, "url": url, "token": token, "check": not no_check})
    out.json(created) if out.as_json else out.show(fields(f"source {name} added", created))


@command(source, "list")
def source_list(client: Client, out: Output) -> None:
    """The registered sources, each with its health (how its agent answered the service's last contact)."""
    listed = client.get("/v1/sources")
    if out.as_json:
        return out.json(listed)
    shown = [
        {**record, "created_at": short_time(record["created_at"]), "health": health_text(record)} for record in listed
    ]
    out.show(rows(SOURCE_COLUMNS, shown, title="sources", whole=("name",)))


@command(source, "show")
@click.argument("name")
def source_show(client: Client, out: Output, name: str) -> None:
    """One source."""
    found = client.get(f"/v1/sources/{name}")
    out.json(found) if out.as_json else out.show(fields(f"source {name}", found))


@command(source, "set")
@click.argument("name")
@click.option("--url", help="The agent's new base URL.")
@click.option("--token", help="The agent's new bearer token (a rotated one).")
@click.option("--no-token", is_flag=True, help="Remove the token.")
@click.option("--no-check", is_flag=True, help="Store the change without asking the agent for its schema first.")
def source_set(
    client: Client, out: Output, name: str, url: str | None, token: str | None, no_token: bool, no_check: bool
) -> None:
    """Change source NAME's agent URL or token; its views keep their rows and history."""
    if token is not None and no_token:
        raise click.UsageError("--token and --no-token exclude each other")
    body: dict = {"check": not no_check}
    if url is not None:
        body["url"] = url
    if token is not None or no_token:
        body["token"] = token
    if len(body) == 1:
        raise click.UsageError("nothing to change: give --url, --token or --no-token")
    changed = client.patch(f"/v1/sources/{name}", body)
    out.json(changed) if out.as_json else out.show(fields(f"source {name} changed", changed))


@command(source, "rm")
@click.argument("name")
def source_rm(client: Client, out: Output, name: str) -> None:
    """Remove source NAME (refused while a view reads it)."""
    client.delete(f"/v1/sources/{name}")
    out.json({"name": name, "deleted": True}) if out.as_json else out.note(f"source {name} removed")


TABLE_COLUMNS = ["table", "columns", "primary_key", "unique_keys"]


@command(source, "tables")
@click.argument("name")
def source_tables(client: Client, out: Output, name: str) -> None:
    """The tables source NAME's agent exposes, with their columns, types and keys (asked of it now)."""
    found = client.get(f"/v1/sources/{name}/tables")
    if out.as_json:
        return out.json(found)
    shown = [
        {
            "table": t["name"],
            "columns": ", ".join(f"{c['name']} {c['type']}" for c in t["columns"]),
            "primary_key": ", ".join(t.get("primary_key") or []) or "-",
            "unique_keys": "; ".join(", ".join(u) for u in t.get("unique_keys") or []) or "-",
        }
        for t in found["tables"]
    ]
    out.show(rows(TABLE_COLUMNS, shown, title=f"tables of {name} ({found['dialect']})", whole=("table",)))


MIRROR_COLUMNS = ["table", "view", "key", "outcome"]


def mirror_rows(done: dict) -> list[dict]:
    """The tables of a mirror's answer as rows: created, existing, then skipped with the reason.

    >>> done = {"created": [{"table": "t", "view": "s_t", "key": []}], "existing": [], "skipped": [{"table": "u", "reason": "name taken"}]}
    >>> [r["outcome"] for r in mirror_rows(done)], mirror_rows(done)[0]["key"]
    (['created', 'skipped: name taken'], '(none: multiset)')
    """
    shown = [
        {**m, "key": ", ".join(m["key"]) or "(none: multiset)", "outcome": outcome}
        for outcome in ("created", "existing")
        for m in done[outcome]
    ]
    return shown + [
        {"table": s["table"], "view": "-", "key": "-", "outcome": f"skipped: {s['reason']}"} for s in done["skipped"]
    ]


@command(source, "mirror")
@click.argument("name")
@click.option(
    "--tables",
    metavar="A,B,…",
    help="The tables to mirror, comma-separated (schema.table outside the default schema); default: every table the agent exposes.",
)
@click.option(
    "--every-s",
    type=click.IntRange(min=1),
    metavar="N",
    help="Have the service sync each new view by itself, at once and then N seconds after its last sync ended.",
)
@click.option("--strategy", help="How the new views' syncs find changes: auto (the default), sketch, group_hash, …")
@ON_SCHEMA_CHANGE
def source_mirror(
    client: Client,
    out: Output,
    name: str,
    tables: str | None,
    every_s: int | None,
    strategy: str | None,
    on_schema_change: str | None,
) -> None:
    """A table view of each table of source NAME, named NAME_TABLE (NAME_SCHEMA_TABLE outside the default schema).

    Run again, it adds the views of the tables that appeared and lists the others as existing.
    A table no view can keep, or whose view name another view has, is skipped with the reason."""
    body: dict = {}
    if tables is not None:
        body["tables"] = [t.strip() for t in tables.split(",") if t.strip()]
    if every_s is not None:
        body["schedule"] = {"every_s": every_s}
    if strategy is not None:
        body["strategy"] = strategy
    if on_schema_change is not None:
        body["on_schema_change"] = on_schema_change
    done = client.post(f"/v1/sources/{name}/mirror", body)
    if out.as_json:
        return out.json(done)
    counts = ", ".join(f"{len(done[k])} {k}" for k in ("created", "existing", "skipped"))
    out.show(rows(MIRROR_COLUMNS, mirror_rows(done), title=f"mirror of {name}: {counts}", whole=("view",)))
