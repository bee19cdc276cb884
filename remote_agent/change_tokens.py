"""Change tokens: a value the agent reads in about a millisecond that changes whenever a
committed write could change what a site query reads (POST /v1/change_token).

The warehouse keeps the token read before the reads of the view version it holds, and sends
it at the start of the next sync. When the token now is the same, no write was committed in
between, so every read of that version saw what a read now would see: the sync answers
"unchanged" without reading a row. Equal tokens prove it, or there is no token; a token is
never a guess. Each is prefixed by the agent's instance (a random id drawn at its start), so
an agent restarted (with another hash key, allow list or version) makes the next sync read.

- **PostgreSQL** (13 or later, a primary): the snapshot a transaction started now would take
  (`pg_current_snapshot()`: xmin, xmax and the transactions in progress between them, 64-bit
  ids that never wrap), the cluster's `system_identifier` and the WAL timeline. Every write
  runs in a transaction with an id (TRUNCATE and DDL too, a subtransaction's rows under its
  own id above its parent's), and the end of one, committed or rolled back, either raises
  xmax (the newest ended id, plus one) or takes an id out of the in-progress list: two equal
  snapshots see every row alike, and so does every read between them. A prepared
  transaction is in progress until COMMIT PREPARED. A promoted standby or a restore starts
  a new timeline, another cluster has another identifier. A hot standby gives none: its
  snapshot lists no transactions in progress (PostgreSQL keeps them apart there), so a
  replayed commit of a transaction between xmin and xmax need not change it.
- **SQLite**: `PRAGMA data_version` on a connection the agent keeps open for its life (the
  number changes when another connection commits, in rollback and WAL modes alike, and only
  then), with that connection's serial number and the file's device, inode, size and
  modification time: a file replaced under the same name, or written by something other
  than SQLite, changes them.
- **MariaDB / MySQL, dump files**: none. A SELECT-only user can read no exact counter: the
  binary log's GTID position misses a session that writes with `sql_log_bin=0`, InnoDB's
  counters are statistics; a dump's size and modification time prove nothing, and a digest
  of it costs the read it would save. Every sync reads, as before.

A site query that reads a view (a SQL view at the source) has no token either: a view may
hold values that no commit changes (`now()`, a foreign table).
"""

from __future__ import annotations

import secrets
import time

from deltasieve_protocol.models import ChangeTokenOut
from remote_agent.adapters import Adapter, TableInfo
from remote_agent.adapters.tokens import SourceToken
from remote_agent.sitequery import ValidatedQuery


def instance_id() -> str:
    """A new agent instance's id: 64 random bits, hex."""
    return secrets.token_hex(8)


def read_token(
    adapter: Adapter, instance: str, query: ValidatedQuery, exposed: dict[str, TableInfo], since: str | None
) -> ChangeTokenOut:
    """The answer to a change-token request for `query`: the token now and whether it is `since`."""
    t0 = time.monotonic()
    views = sorted(t for t in query.tables if t in exposed and exposed[t].kind == "view")
    if views:
        read = SourceToken(None, f"the site query reads the view(s) {views}: a view may hold values no commit changes")
    else:
        read = adapter.change_token()
    token = f"{instance}/{read.value}" if read.value is not None else None
    return ChangeTokenOut(
        change_token=token,
        unchanged=token is not None and token == since,
        reason=read.reason,
        elapsed_s=round(time.monotonic() - t0, 4),
    )
