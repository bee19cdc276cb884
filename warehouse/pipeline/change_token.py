"""The change token: a sync that finds nothing changed at a site without reading it.

Before any read of a site, the sync asks its agent for the source's change token (POST
/v1/change_token; what a token is on each engine, and why equal tokens prove that nothing
changed, is in remote_agent/change_tokens.py), sending the token kept with the version it
syncs from. When the agent answers that the token is the same, no write was committed at
the source since that version's reads began: the site's delta is empty, nothing is read,
and the fragment is carried over to the new version as an empty-delta sync leaves it
(store/carried.py: every tuple has seen one sync more). Otherwise the strategy runs, and the
token the agent answered (read before any of this sync's reads) is kept with the version
this sync commits, in FILE beside the fragment: it commits with it, and a failed sync
leaves the previous version's.

The kept token is not sent, and the sync reads, when the site query differs from the one it
was read for (a redefinition, a widening, other column policies: the site's digest is kept
with it), and for an audit's full reads. No token is kept after a read that resumed from
rows a failed attempt received (they were read before this attempt's token), nor from an
agent that gives none (MariaDB, dump files, a standby, an agent that predates tokens or
runs with --no-change-token): those sync as they always did.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from deltasieve_protocol import frames
from deltasieve_protocol.models import ChangeTokenControl, ChangeTokenOut, SiteSpec
from warehouse.agent_client import AgentClient
from warehouse.errors import AgentRejected, ProtocolError
from warehouse.formats import check_format
from warehouse.store.versions import TMP_MARK

#: The file a version's site keeps its token in, and its format.
FILE = "change_token.json"
FORMAT = 1
#: The statuses of an agent that has no change-token endpoint (it predates it).
NO_ENDPOINT = (404, 405)


@dataclass(frozen=True)
class Kept:
    """A token kept with a version's site, and the digest of the site query it was read for."""

    token: str
    site: str


@dataclass(frozen=True)
class Probe:
    """The agent's answer: the token now (None: none, `reason` says why) and whether it is the kept one."""

    token: str | None
    unchanged: bool = False
    reason: str | None = None


def site_digest(spec: SiteSpec) -> str:
    """A digest of the site query as the agent's requests carry it: a token kept for one
    query serves no other.

    >>> spec = SiteSpec(sql="SELECT id FROM t", key=["id"], columns=[{"name": "id", "type": "int"}])
    >>> site_digest(spec) == site_digest(spec.model_copy()), len(site_digest(spec))
    (True, 32)
    >>> site_digest(spec) == site_digest(spec.model_copy(update={"sql": "SELECT id FROM u"}))
    False
    """
    return hashlib.sha256(json.dumps(spec.model_dump(), sort_keys=True).encode()).hexdigest()[:32]


def load(site_dir: Path | None) -> Kept | None:
    """The token a version's site keeps (None: none)."""
    path = site_dir / FILE if site_dir is not None else None
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    check_format(data, FORMAT, f"the change token of {site_dir} ({path})")
    return Kept(data["token"], data["site"])


def save(site_dir: Path, kept: Kept) -> None:
    """Keep `kept` in `site_dir`: a new file (a carried site's is a link to the previous version's)."""
    site_dir.mkdir(parents=True, exist_ok=True)
    written = site_dir / f"{FILE}{TMP_MARK}"
    written.write_text(json.dumps({"format": FORMAT, "token": kept.token, "site": kept.site}))
    os.replace(written, site_dir / FILE)


def since(kept: Kept | None, spec: SiteSpec) -> str | None:
    """The token to send: the kept one, if it was read for this site query.

    >>> spec = SiteSpec(sql="SELECT id FROM t", key=["id"], columns=[{"name": "id", "type": "int"}])
    >>> since(Kept("a/pg/1", site_digest(spec)), spec), since(Kept("a/pg/1", "another"), spec), since(None, spec)
    ('a/pg/1', None, None)
    """
    return kept.token if kept is not None and kept.site == site_digest(spec) else None


def probe(client: AgentClient, spec: SiteSpec, kept: str | None) -> Probe:
    """Ask the agent for the token now, and whether it is `kept`; an agent that predates
    tokens gives none."""
    control = ChangeTokenControl(site=spec, since=kept)
    message = control.model_dump(exclude_none=True)
    try:
        answer = list(client.exchange("/v1/change_token", [frames.json_frame(frames.CONTROL, message)]))
    except AgentRejected as exc:
        if exc.status in NO_ENDPOINT and exc.agent_code is None:
            return Probe(None, reason="the agent predates change tokens")
        raise
    try:
        out = ChangeTokenOut.model_validate(answer[-1].json())
    except (ValidationError, frames.FrameError) as exc:
        raise ProtocolError(f"malformed change token from the agent at {client.url}: {exc}") from None
    return Probe(out.change_token, out.unchanged and out.change_token is not None, out.reason)
