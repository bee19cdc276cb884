"""The row_version strategy's predicate: rows a PostgreSQL source wrote since a snapshot.

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
