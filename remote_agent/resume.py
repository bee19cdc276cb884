"""Which extracts the agent resumes after a key the warehouse sent, and how (deltasieve_protocol/resume.py).

Only a whole, keyed read can be resumed: with units or tuple hashes the agent tells the
warehouse which of the keys it sent are gone, and it would count the keys before the
cursor as gone; a grouped (multiset) query's rows may share a key with a row on either
side of the cursor; a key read as another SQL expression (`read_as`) or type
(`read_from`) is not the value the database orders by. Nor are dump files resumed: the
retry might read a newer dump than the first attempt did, and a read of dumps is the
record of which ones it read (the snapshot_diff strategy's state).
"""

from __future__ import annotations

from collections.abc import Sequence

from deltasieve_protocol.resume import resumable_key
from remote_agent.adapters.base import Adapter
from remote_agent.sitequery import ValidatedQuery


def resumed(
    adapter: Adapter, query: ValidatedQuery, after: Sequence[object] | None, *, whole: bool
) -> ValidatedQuery | None:
    """`query` read strictly after the key `after`; None when it is read from the start.

    `whole`: the request asks for every row (no units, no tuple hashes).
    """
    if after is None or not whole or query.grouped or query.intervals:
        return None
    if adapter.dumps_read(query.tables) is not None:
        return None
    names = [c.name for c in query.columns]
    columns = [query.columns[names.index(k)] for k in query.key]
    if any(c.read_as is not None or c.read_from is not None or c.policy is not None for c in columns):
        return None
    if not resumable_key([c.type.kind for c in columns], after):
        return None
    return query.resumed_after(tuple(adapter.bind(v) for v in after))
