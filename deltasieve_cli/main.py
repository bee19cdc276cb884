"""The `deltasieve` command: sources, views and syncs of a deltasieve service, from a shell.

The top-level group `cli` and its global options live here; each resource's commands live
in a module of their own (sources.py, views.py, syncs.py, data.py) and are added below.
"""

from __future__ import annotations

import click

from deltasieve_cli import data, dbt, keys, sources, syncs, views
from deltasieve_cli.commands import CONTEXT, State

DEFAULT_URL = "http://127.0.0.1:8000"

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
    help="Sent as X-API-Key (a service with keys needs one on every call).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine output for any command (as its own --json).")
@click.version_option(package_name="deltasieve", prog_name="deltasieve")
@click.pass_context
def cli(ctx: click.Context, url: str, api_key: str | None, as_json: bool) -> None:
    """Client of a deltasieve service: register sources, define views, run and follow syncs,
    read their deltas and the views' rows."""
    ctx.obj = State(url, api_key, as_json)
    ctx.call_on_close(ctx.obj.client.close)


for _command in (
    sources.source,
    views.view,
    views.stats,
    syncs.sync,
    syncs.watch,
    syncs.syncs,
    data.delta,
    data.changes,
    data.rows_,
    keys.key,
    keys.audit,
    dbt.dbt,
):
    cli.add_command(_command)


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="deltasieve")
