"""What every `deltasieve` command shares: the global options' state, the subcommand
decorator that adds --json, and times shown to people."""

from __future__ import annotations

import functools

import click

from deltasieve_cli.client import Client
from deltasieve_cli.render import Output

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class State:
    """What the global options set: the service and the output mode."""

    def __init__(self, url: str, api_key: str | None, as_json: bool):
        self.client = Client(url, api_key)
        self.as_json = as_json


def command(group: click.Group | None, name: str | None = None, **kwargs):
    """A subcommand of `group` (None: a top-level one, added by main.py) that takes --json and
    gets (client, output) first."""

    def wrap(fn):
        @(group.command if group is not None else click.command)(name, context_settings=CONTEXT, **kwargs)
        @click.option("--json", "as_json", is_flag=True, help="Machine output: JSON (NDJSON for streams).")
        @click.pass_obj
        @functools.wraps(fn)
        def run(state: State, as_json: bool, **params):
            return fn(state.client, Output(as_json or state.as_json), **params)

        return run

    return wrap


def short_time(iso: str | None) -> str | None:
    """An ISO 8601 time to the second, without the zone (the service's are UTC).

    >>> short_time("2026-11-26T18:35:17.816+00:00")
    '2026-11-26 18:35:17'
    """
    return iso[:19].replace("T", " ") if iso else None
