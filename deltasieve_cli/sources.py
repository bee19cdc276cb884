"""`deltasieve source`: the agents the warehouse reads from."""

from __future__ import annotations

import click

from deltasieve_cli.client import Client
from deltasieve_cli.commands import CONTEXT, command, short_time
from deltasieve_cli.render import Output, fields, rows


@click.group(context_settings=CONTEXT)
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
