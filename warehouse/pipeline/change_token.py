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

An agent's answer that it gives no token is kept too, with the time it was given: for
ASK_AGAIN_S after it, syncs of the site do not ask (one round trip fewer on every sync of a
MariaDB source or a dump); then the agent is asked again, since it may have been restarted
with tokens on, or its standby promoted.

Where the statistics expect the sync to find changes (`rides`), the kept token is not sent
on its own before planning: it rides on the exchange's first request (a sketch exchange's
first stage, SketchControl.change_token), which the agent answers with the token read
before any row, ending there, unread, when the token is the kept one. A sync that finds
changes then spares the token's round trip; one that finds nothing ends in that one
request as it would have after the token's own, only planned first. A strategy whose first
request cannot carry it has it asked on its own after planning, still before any read. An
agent that predates the field answers the stage without the token: nothing is kept, and
the next sync asks on its own again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
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
#: Seconds an agent's answer that it gives no token for a site is believed.
ASK_AGAIN_S = 3600.0
#: The token rides on the exchange's first request when the statistics give a sync less
#: than this chance of finding nothing: asked on its own, it costs a round trip on a sync
#: that finds changes; riding, it costs a sync that finds nothing its planning (5-7 ms at
#: 1,000 to 10,000 rows, bench-small) and a larger request, about a round trip's time
#: (4-8 ms) on loopback. Even odds.
RIDES_BELOW = 0.5
#: The reason kept in the metrics when the agent answered the exchange without the token.
NOT_ANSWERED = "the agent answered the sketch request without the change token (it predates the field)"


@dataclass(frozen=True)
class Kept:
    """A token kept with a version's site, and the digest of the site query it was read for;
    or (token None) the agent's answer that it gives none, why, and when (seconds since the epoch)."""

    token: str | None
    site: str
    reason: str | None = None
    asked_at: float | None = None


@dataclass(frozen=True)
class Riding:
    """The kept token, to be sent with the exchange's first request rather than on its own."""

    since: str


@dataclass(frozen=True)
class Probe:
    """The agent's answer: the token now (None: none, `reason` says why) and whether it is
    the kept one; `asked_at`: when the agent gave it (earlier than this sync when a kept
    answer of none stood in for asking)."""

    token: str | None
    unchanged: bool = False
    reason: str | None = None
    asked_at: float | None = None


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
    return Kept(data["token"], data["site"], data.get("reason"), data.get("asked_at"))


def save(site_dir: Path, kept: Kept) -> None:
    """Keep `kept` in `site_dir`: a new file (a carried site's is a link to the previous version's)."""
    site_dir.mkdir(parents=True, exist_ok=True)
    written = site_dir / f"{FILE}{TMP_MARK}"
    fields: dict[str, object] = {"format": FORMAT, "token": kept.token, "site": kept.site}
    if kept.token is None:
        fields.update(reason=kept.reason, asked_at=kept.asked_at)
    written.write_text(json.dumps(fields))
    os.replace(written, site_dir / FILE)


def since(kept: Kept | None, spec: SiteSpec) -> str | None:
    """The token to send: the kept one, if it was read for this site query.

    >>> spec = SiteSpec(sql="SELECT id FROM t", key=["id"], columns=[{"name": "id", "type": "int"}])
    >>> since(Kept("a/pg/1", site_digest(spec)), spec), since(Kept("a/pg/1", "another"), spec), since(None, spec)
    ('a/pg/1', None, None)
    """
    return kept.token if kept is not None and kept.site == site_digest(spec) else None


def known_none(kept: Kept | None, spec: SiteSpec, now: float) -> Probe | None:
    """The agent's kept answer that it gives no token for this site query, while it is
    believed (ASK_AGAIN_S); None: ask it.

    >>> spec = SiteSpec(sql="SELECT id FROM t", key=["id"], columns=[{"name": "id", "type": "int"}])
    >>> none = Kept(None, site_digest(spec), "MariaDB gives none", asked_at=1000.0)
    >>> known_none(none, spec, 1000.0 + ASK_AGAIN_S - 1)
    Probe(token=None, unchanged=False, reason='MariaDB gives none', asked_at=1000.0)
    >>> known_none(none, spec, 1000.0 + ASK_AGAIN_S), known_none(Kept("a/1", site_digest(spec)), spec, 1000.0)
    (None, None)
    """
    if kept is None or kept.token is not None or kept.asked_at is None or kept.site != site_digest(spec):
        return None
    return Probe(None, reason=kept.reason, asked_at=kept.asked_at) if now - kept.asked_at < ASK_AGAIN_S else None


def keep(probe: Probe, spec: SiteSpec) -> Kept | None:
    """What a version keeps of the agent's answer: its token, or its answer that it gives none.

    >>> spec = SiteSpec(sql="SELECT id FROM t", key=["id"], columns=[{"name": "id", "type": "int"}])
    >>> keep(Probe("a/1", asked_at=5.0), spec).token, keep(Probe(None, reason="a dump", asked_at=5.0), spec).asked_at
    ('a/1', 5.0)
    """
    if probe.token is not None:
        return Kept(probe.token, site_digest(spec))
    return Kept(None, site_digest(spec), probe.reason, probe.asked_at) if probe.asked_at is not None else None


def rides(changes: float, observed: bool) -> bool:
    """Whether the kept token rides on the exchange's first request rather than go on its own
    before planning: when the statistics, from observations, give the sync less than
    RIDES_BELOW chance of finding nothing (the `changes` they expect, as Poisson). On the first
    sync after a load they hold none: the token goes on its own.

    >>> rides(10.0, True), rides(0.1, True), rides(10.0, False)
    (True, False, False)
    """
    return observed and math.exp(-changes) < RIDES_BELOW


def answered(out: ChangeTokenOut | None, asked_at: float) -> Probe:
    """The agent's answer to a token that rode on another request (None: it gave none, as
    an agent that predates the field does; nothing is then kept)."""
    if out is None:
        return Probe(None, reason=NOT_ANSWERED)
    return Probe(out.change_token, out.proves_unchanged, out.reason, asked_at)


def probe(client: AgentClient, spec: SiteSpec, kept: str | None) -> Probe:
    """Ask the agent for the token now, and whether it is `kept`; an agent that predates
    tokens gives none."""
    control = ChangeTokenControl(site=spec, since=kept)
    asked_at = time.time()
    message = control.model_dump(exclude_none=True)
    try:
        answer = list(client.exchange("/v1/change_token", [frames.json_frame(frames.CONTROL, message)]))
    except AgentRejected as exc:
        if exc.status in NO_ENDPOINT and exc.agent_code is None:
            return Probe(None, reason="the agent predates change tokens", asked_at=asked_at)
        raise
    try:
        out = ChangeTokenOut.model_validate(answer[-1].json())
    except (ValidationError, frames.FrameError) as exc:
        raise ProtocolError(f"malformed change token from the agent at {client.url}: {exc}") from None
    return answered(out, asked_at)
