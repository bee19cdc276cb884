"""Names every room of the warehouse shares: stored columns, delta operations, Spark schemas."""

from __future__ import annotations

from deltasieve_protocol.types import Column

#: Update statistics kept beside each stored tuple (column names are a stored format): the
#: syncs it has seen, counting its entry (TNO), and the syncs that really updated it, plus
#: one for the entry (UNO); P(update) = UNO / TNO.
TNO = "__tno"
UNO = "__uno"
#: The operation column of a stored delta.
OP = "__op"
#: Operations of a delta line; KEEP marks a row that stays as it was.
INSERT, UPDATE, DELETE, KEEP = "insert", "update", "delete", "keep"
#: A stored delta's list of the columns each update changed (deltas/changed_columns.py);
#: null on inserts and deletes, absent from a delta that does not keep it (a multiset view's).
CHANGED = "__ds_changed"


def spark_schema(columns: list[Column]) -> str:
    """The Spark DDL schema of `columns`, names quoted.

    >>> from deltasieve_protocol.types import LogicalType
    >>> spark_schema([Column("id", LogicalType("int")), Column("name", LogicalType("text"))])
    '`id` bigint, `name` string'
    """
    return ", ".join(f"`{c.name}` {c.type.spark_ddl()}" for c in columns)
