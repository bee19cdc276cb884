"""The row_version strategy's predicate, rows a PostgreSQL source wrote since a snapshot, and that snapshot.

PostgreSQL stamps every row version with the 32-bit id of the transaction that wrote it,
the system column `xmin`, which a SELECT-only role may read. The warehouse sends the xmin
of the snapshot the previous sync took (a 64-bit `xid8`, its epoch included); the agent,
never the wire, writes the condition: the row's xmin lies at or after that xmin and before
the current snapshot's xmax, both compared modulo 2^32 as distances from the old xmin, so
the test holds across the wraparound of the 32-bit counter. The upper bound is what keeps a
frozen row (which keeps its raw xmin however old) out: with 2^31 as the bound, about half of
the rows older than 2^31 transactions would look new again. The warehouse makes sure the
span stays far below 2^32 (warehouse/strategies/row_version/xid_snapshots.py) and falls back to a full
reconciliation otherwise.
"""

from __future__ import annotations

from sqlglot import exp

from remote_agent.adapters.base import Session
from remote_agent.errors import Forbidden

#: Size of PostgreSQL's 32-bit transaction id space.
XID_SPACE = 2**32


def _as_bigint(value: exp.Expression) -> exp.Expression:
    """xid and xid8 have no cast to a number: through their text form."""
    return exp.cast(exp.cast(value, exp.DataType.Type.TEXT), exp.DataType.Type.BIGINT)


def changed_since_condition(alias: str, since_xmin: int) -> exp.Expression:
    """The rows of table `alias` whose xmin is at or after `since_xmin` (an xid8) and before
    the current snapshot's xmax, in modular arithmetic on the 32-bit xmin.

    >>> changed_since_condition("l", 2**32 + 5).sql(dialect="postgres")
    '(CAST(CAST(l.xmin AS TEXT) AS BIGINT) - 5 + 4294967296) % 4294967296 < (SELECT CAST(CAST(PG_SNAPSHOT_XMAX(PG_CURRENT_SNAPSHOT()) AS TEXT) AS BIGINT)) - 4294967301'
    """
    if not 0 <= since_xmin < 2**63:
        raise ValueError(f"an xid8 lies in [0, 2^63): {since_xmin}")
    low = since_xmin % XID_SPACE
    row = _as_bigint(exp.column("xmin", alias, quoted=False))
    distance = exp.Mod(
        this=exp.Paren(
            this=exp.Add(
                this=exp.Sub(this=row, expression=exp.Literal.number(low)), expression=exp.Literal.number(XID_SPACE)
            )
        ),
        expression=exp.Literal.number(XID_SPACE),
    )
    xmax_now = exp.Anonymous(this="pg_snapshot_xmax", expressions=[exp.Anonymous(this="pg_current_snapshot")])
    current = exp.Subquery(this=exp.select(_as_bigint(xmax_now)))
    return exp.LT(this=distance, expression=exp.Sub(this=current, expression=exp.Literal.number(since_xmin)))


def is_candidate(row_xmin: int, since_xmin: int, xmax_now: int) -> bool:
    """What `changed_since_condition` computes, in Python (for the tests and the README).

    >>> is_candidate(7, 2**32 + 5, 2**32 + 100)  # written after the old xmin, in the next epoch
    True
    >>> is_candidate(4, 2**32 + 5, 2**32 + 100)  # one below the old xmin: ended before it
    False
    >>> is_candidate(2**32 - 10, 2**32 - 20, 2**32 + 30)  # before the wraparound
    True
    >>> is_candidate(12, 2**32 - 20, 2**32 + 30)  # after it
    True
    >>> is_candidate(3000, 2**32 + 5, 2**32 + 100)  # a frozen row's old raw xmin
    False
    """
    return (row_xmin - since_xmin % XID_SPACE + XID_SPACE) % XID_SPACE < xmax_now - since_xmin


# The current snapshot (xid8 values as text: they have no cast to a number), the cluster's
# identity (pg_control_system() is callable by any role on PostgreSQL 15) and the WAL
# position at or after every commit the snapshot saw: evaluated after the statement took
# the snapshot, a primary's insert position (a standby refuses pg_current_wal_insert_lsn()),
# or on a standby the end of what it received, at or after what it replayed (a standby
# makes a commit visible just before it advances its replayed position). WAL positions as
# bytes, text: pg_lsn has no cast to a number.
_SNAPSHOT_SQL = """
SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text,
       ARRAY(SELECT x::text FROM pg_snapshot_xip(s) AS x ORDER BY 1), {identity}, {wal}
FROM pg_current_snapshot() AS s
"""
_IDENTITY_SQL = "(SELECT system_identifier::text FROM pg_control_system())"
_WAL_SQL = (
    "((CASE WHEN pg_is_in_recovery() THEN GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())"
    " ELSE pg_current_wal_insert_lsn() END) - '0/0'::pg_lsn)::text"
)
# On a standby, what it has replayed, read before the snapshot's transaction: replay goes on
# meanwhile, so this is a lower bound of what the snapshot sees. NULL on a primary.
_REPLAYED_SQL = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::text WHERE pg_is_in_recovery()"


def current_snapshot(session: Session) -> dict:
    """The snapshot a PostgreSQL read taken now sees, the server's identity and its WAL
    positions (`Adapter.source_snapshot`)."""

    try:
        with session.read() as reader:
            replayed = reader.rows(_REPLAYED_SQL, limit=1)
        with session.read() as reader:
            row = reader.rows(_SNAPSHOT_SQL.format(identity=_IDENTITY_SQL, wal=_WAL_SQL), limit=1)[0]
    except Forbidden:  # a server that revoked pg_control_system() or a WAL function: nothing to compare
        replayed = []
        with session.read() as reader:
            row = reader.rows(_SNAPSHOT_SQL.format(identity="NULL::text", wal="NULL::text"), limit=1)[0]
    xmin, xmax, xip, identity, wal = row
    return {
        "xmin": int(xmin),
        "xmax": int(xmax),
        "xip": [int(x) for x in xip],
        "system_identifier": identity,
        "wal_lsn": None if wal is None else int(wal),
        "replayed_lsn": int(replayed[0][0]) if replayed and replayed[0][0] is not None else None,
    }
