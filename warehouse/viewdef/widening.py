"""Widening: which changes of a view's column types keep every stored value exactly.

When a column the view reads changes type at its source, the view is bound again against
the source's new schema and the two definitions are compared column by column. A view
whose schema policy is `evolve` takes the new definition in place when every difference is
a lossless widening (the stored rows are cast to the wider types, nothing is read again);
any other difference, or one of a view under `freeze`, fails the sync.

Lossless widenings of the logical types (deltasieve_protocol/types.py):

- decimal(p,s) to decimal(p',s') with at least as many integer digits (p'-s' >= p-s) and
  at least as many fraction digits (s' >= s): PostgreSQL numeric(14,2) to numeric(16,4);
- int (64 bits, at most 19 digits) to decimal(p,s) with p-s >= 19;
- decimal(p,0) with p <= 18 to int: every such value is below 2^63;
- date to timestamp: a date is the timestamp of its midnight, and two dates stay apart;
- decimal(p,s) to text: every decimal has an exact text (PostgreSQL's unconstrained
  numeric, once read as decimal(38,10), is now read as the text PostgreSQL prints). The
  stored values become their text at the old scale (1.5000000000); the sync that takes the
  widening then reads the source's text (1.5) and updates the rows whose text differs.

Changes a source makes that keep the logical type (int to bigint, real to double
precision, varchar(n) to text or to a longer varchar) are not changes here at all: the
view's types and its stored values are already those. Nullability is not part of a
logical type, so a dropped NOT NULL is not seen either. Everything else (decimal to float,
float to decimal, int to float past 2^53, text to anything, timestamp to timestamptz,
whose meaning depends on a time zone, int to text) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltasieve_protocol.types import Column, LogicalType
from warehouse.viewdef.model import ViewDef

#: Decimal digits every int64 value fits in (9,223,372,036,854,775,807).
INT64_DIGITS = 19
#: Widest decimal(p,0) all of whose values are int64 values.
INT64_SAFE_PRECISION = 18
#: The action a sync record lists for a change it took in place.
WIDENED = "widened"


def widens(old: LogicalType, new: LogicalType) -> bool:
    """Whether every value of type `old` is a value of type `new`, kept exactly.

    >>> t = LogicalType.parse
    >>> widens(t("decimal(14,2)"), t("decimal(16,4)")), widens(t("decimal(16,4)"), t("decimal(14,2)"))
    (True, False)
    >>> widens(t("decimal(10,4)"), t("float")), widens(t("decimal(10,4)"), t("decimal(12,2)"))
    (False, False)
    >>> widens(t("int"), t("decimal(19,0)")), widens(t("int"), t("decimal(21,2)")), widens(t("int"), t("decimal(18,0)"))
    (True, True, False)
    >>> widens(t("decimal(18,0)"), t("int")), widens(t("decimal(19,0)"), t("int")), widens(t("decimal(5,1)"), t("int"))
    (True, False, False)
    >>> widens(t("date"), t("timestamp")), widens(t("timestamp"), t("timestamptz")), widens(t("int"), t("float"))
    (True, False, False)
    >>> widens(t("decimal(38,10)"), t("text")), widens(t("text"), t("decimal(38,10)")), widens(t("float"), t("text"))
    (True, False, False)
    """
    if old == new:
        return True
    if old.kind == new.kind == "decimal":
        return new.precision - new.scale >= old.precision - old.scale and new.scale >= old.scale
    if (old.kind, new.kind) == ("int", "decimal"):
        return new.precision - new.scale >= INT64_DIGITS
    if (old.kind, new.kind) == ("decimal", "int"):
        return old.scale == 0 and old.precision <= INT64_SAFE_PRECISION
    return (old.kind, new.kind) in (("date", "timestamp"), ("decimal", "text"))


@dataclass(frozen=True)
class TypeChange:
    """A column whose type differs between two definitions of a view.

    `site` is the index of the site query it is a column of, None for a column of the view.
    """

    site: int | None
    column: str
    old: LogicalType
    new: LogicalType

    @property
    def widened(self) -> bool:
        return widens(self.old, self.new)


def type_changes(old: ViewDef, new: ViewDef) -> list[TypeChange] | None:
    """The columns whose types differ from `old` to `new`, the view's and each site query's;
    None when the two differ in more than types (other columns, keys, site queries).

    >>> from warehouse.viewdef.model import SiteQuery
    >>> def view(amount):
    ...     columns = [Column("id", LogicalType("int")), Column("amount", LogicalType.parse(amount))]
    ...     return ViewDef("SELECT ...", columns, ["id"], [SiteQuery("pg", "SELECT ...", columns, ["id"])])
    >>> [(c.site, c.column, str(c.new), c.widened) for c in type_changes(view("decimal(14,2)"), view("decimal(16,4)"))]
    [(None, 'amount', 'decimal(16,4)', True), (0, 'amount', 'decimal(16,4)', True)]
    >>> type_changes(view("decimal(14,2)"), view("decimal(14,2)"))
    []
    >>> type_changes(view("text"), ViewDef("SELECT ...", [], ["id"], [])) is None
    True
    """
    if _shape(old) != _shape(new):
        return None
    changes = _changed(None, old.columns, new.columns)
    for i, (was, now) in enumerate(zip(old.sites, new.sites, strict=True)):
        changes += _changed(i, was.columns, now.columns)
    return changes


def _changed(site: int | None, old: list[Column], new: list[Column]) -> list[TypeChange]:
    return [TypeChange(site, o.name, o.type, n.type) for o, n in zip(old, new, strict=True) if o.type != n.type]


def _shape(view: ViewDef) -> dict:
    """The definition's JSON without its column types: what must not change for a widening."""
    data = view.to_json()
    for columns in [data["columns"], *(site["columns"] for site in data["sites"])]:
        for column in columns:
            column.pop("type")
    return data
