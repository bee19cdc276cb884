"""A full read that resumes after a failure, from the rows its failed attempts received.

A load, or a full_ship sync, reads the whole site query; at 10M rows that is minutes, and
a failure near its end (the agent killed, the link cut) used to cost all of it again. The
agent reads such a read in key order (remote_agent/chunks.py), so the rows the warehouse
filed before the answer broke off are a prefix of it: each whole frame received is
written to the attempt's staging file (a frame cut short is never written). When the
attempt fails, that file is kept in a folder of the sync's staging beside the attempt's
(store/read_so_far.py), with the key of its last row; the sync's retry (SERVICE_AGENT_RETRIES)
sends the extract again with `resume_after` set to that key, the agent reads the rows
strictly after it, and the parts together are the answer.

Still exact, and one view version: nothing is visible before the sync commits, and the
parts are one read of the site query in key order, the pause between the attempts like
the one between two chunks of one read (the fuzzy snapshot of chunks.py). A full read
finds deleted keys as the snapshot keys its answer left out (FragmentBuild.UNTOUCHED_GONE),
so the answer is every part: a key read in the first attempt is not gone because the
second did not read it again.

Not resumed (read from the start again, as before): a multiset's grouped site query, a
key of other types than integers and text or read as another type (deltasieve_protocol/resume.py),
dump files, a load that reads the source's state first (timestamp, row_version: the state
must come from before the first part's read), and reads that send units or hashes. An
agent that predates `resume_after`, or does not resume by this key, reads from the start
and says nothing; its answer then replaces what was kept.
"""

from __future__ import annotations

from deltasieve_protocol.resume import RESUMABLE_KINDS
from warehouse.strategies.base import Answer, SiteContext, extract_exchange
from warehouse.viewdef import SiteQuery


def resumable(site: SiteQuery) -> bool:
    """Whether a full read of `site` can resume after the last key received (see the module).

    >>> from deltasieve_protocol.types import Column, LogicalType
    >>> site = SiteQuery("s", "SELECT id, v FROM t", [Column("id", LogicalType("int")), Column("v", LogicalType("float"))], ["id"])
    >>> resumable(site), resumable(SiteQuery("s", "SELECT v FROM t", site.columns, ["v"]))
    (True, False)
    """
    types = {c.name: c.type.kind for c in site.columns}
    return not site.grouped and all(types[k] in RESUMABLE_KINDS and k not in site.read_from for k in site.key)


def full_read(ctx: SiteContext) -> Answer:
    """The whole site query (an extract that sends nothing), after what earlier attempts kept
    where it can resume; its parts are the answer's returned rows."""
    so_far = ctx.resume
    if so_far is None or not resumable(ctx.site):
        return extract_exchange(ctx)
    kept, complete = so_far.rows, False
    try:
        answer = extract_exchange(ctx, resume_after=so_far.after)
        complete = True
    finally:  # whatever ended the attempt, the whole frames it filed count
        so_far.take(ctx.staging / "returned.parquet", ctx.site.key, continued=ctx.client.resumed, complete=complete)
    if kept and ctx.client.resumed:
        ctx.metrics.resumed_from_rows = kept
    if so_far.parts:
        answer.returned = so_far.paths
    return answer
