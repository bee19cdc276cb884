"""`deltasieve key` and `deltasieve audit`: the service's API keys and its audit log (both for an admin key)."""

from __future__ import annotations

import click

from deltasieve_cli.client import Client
from deltasieve_cli.commands import CONTEXT, command, short_time
from deltasieve_cli.render import Output, fields, rows


@click.group(context_settings=CONTEXT)
def key() -> None:
    """API keys of the service (/v1/keys): read, sync or admin, optionally limited to views and sources."""


KEY_COLUMNS = ["name", "scope", "views", "sources", "created_at"]


def limits_text(names: list[str] | None) -> str:
    """A key's limit for people.

    >>> limits_text(None), limits_text(["a", "b"])
    ('(any)', 'a, b')
    """
    return "(any)" if names is None else ", ".join(names) or "(none)"


@command(key, "add")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(["read", "sync", "admin"]),
    default="read",
    show_default=True,
    help="read: GETs of views, sources, syncs and data; sync: also start and cancel syncs; admin: everything.",
)
@click.option("--view", "views", multiple=True, help="Limit the key to this view (repeat for more).")
@click.option(
    "--source", "sources", multiple=True, help="Limit the key to this source and the views reading only it (repeat)."
)
def key_add(
    client: Client, out: Output, name: str, scope: str, views: tuple[str, ...], sources: tuple[str, ...]
) -> None:
    """Make key NAME; the key is printed this once (the service keeps only its digest)."""
    body: dict = {"name": name, "scope": scope}
    if views:
        body["views"] = list(views)
    if sources:
        body["sources"] = list(sources)
    created = client.post("/v1/keys", body)
    if out.as_json:
        return out.json(created)
    out.show(fields(f"key {name} added", {k: v for k, v in created.items() if k != "key"}))
    out.note("the key (shown this once; store it now):")
    click.echo(created["key"])


@command(key, "list")
def key_list(client: Client, out: Output) -> None:
    """The keys made through the API (never the keys themselves)."""
    listed = client.get("/v1/keys")
    if out.as_json:
        return out.json(listed)
    shown = [
        {
            **record,
            "views": limits_text(record["views"]),
            "sources": limits_text(record["sources"]),
            "created_at": short_time(record["created_at"]),
        }
        for record in listed
    ]
    out.show(rows(KEY_COLUMNS, shown, title="keys", whole=("name",)))


@command(key, "revoke")
@click.argument("name")
def key_revoke(client: Client, out: Output, name: str) -> None:
    """Revoke key NAME: the service refuses it from the next call on."""
    client.delete(f"/v1/keys/{name}")
    out.json({"revoked": name}) if out.as_json else out.note(f"key {name} revoked")


AUDIT_COLUMNS = ["at", "key_name", "method", "route", "status", "rows"]


@command(None, "audit")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="Entries to show.")
def audit(client: Client, out: Output, limit: int) -> None:
    """The audit log (an admin key): who changed or read what, when, newest first."""
    entries = client.get("/v1/audit", limit=limit)
    if out.as_json:
        return out.json(entries)
    shown = [{**e, "at": short_time(e["at"]), "key_name": e["key_name"] or "-"} for e in entries]
    out.show(rows(AUDIT_COLUMNS, shown, title="audit log", whole=("route",)))
