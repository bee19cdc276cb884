"""PostgreSQL types as logical types, and the SQL that reads those without a logical counterpart.

A column is mapped by the type at the bottom of its chain of domains. Types with no
logical counterpart are read through a `read_as` template: as the text PostgreSQL prints
for them (an unconstrained numeric keeps its digits, NaN and infinities), arrays and
composite values as JSON text, PostGIS values as extended WKB. docs/sources/postgresql.md
lists the forms.
"""

from __future__ import annotations

import re

from deltasieve_protocol.types import MAX_DECIMAL_PRECISION, LogicalType

#: Selected instead of a column whose type has no logical counterpart (uuid, json, intervals...):
#: its text, which for these types is what their output function prints.
CAST_TO_TEXT = "CAST({col} AS TEXT)"
#: Arrays as JSON text: nested lists for several dimensions, NULL elements as null.
ARRAY_AS_JSON = "CAST(ARRAY_TO_JSON({col}) AS TEXT)"
#: Composite values (and hstore, through its cast to json) as a JSON object's text.
AS_JSON = "CAST(TO_JSON({col}) AS TEXT)"
#: PostGIS geometry as extended WKB (the SRID inside); geography as the geometry it casts to.
GEOMETRY_AS_EWKB = "ST_AsEWKB({col})"
GEOGRAPHY_AS_EWKB = "ST_AsEWKB(CAST({col} AS geometry))"
#: Types whose cast to text is a function of its own, not their output: inet and cidr's
#: `text(inet)` always shows the mask (10.0.1.1/32). Their output function prints 10.0.1.1.
_OUTPUT_TEXT = {"inet": "TEXTIN(INET_OUT({col}))", "cidr": "TEXTIN(CIDR_OUT({col}))"}
#: Types read through a read_as of their own, by the name at the bottom of their domains.
_READ_AS = {
    "hstore": ("text", AS_JSON),
    "geometry": ("bytes", GEOMETRY_AS_EWKB),
    "geography": ("bytes", GEOGRAPHY_AS_EWKB),
}
#: Forms whose text the server casts back to a value equal to the stored one (`key_order`).
BOUND_BACK = frozenset({CAST_TO_TEXT, *_OUTPUT_TEXT.values()})
#: pg_type.typtype of a composite type (a table's row type or CREATE TYPE ... AS (...)).
COMPOSITE = "c"

_INTEGERS = {"smallint", "integer", "bigint"}
_FLOATS = {"real", "double precision"}
_TEXTS = {"text", "character varying", "varchar", "character", "char", "bpchar", "name", "citext"}
_SIMPLE = {"bytea": "bytes", "boolean": "bool", "date": "date"}
_NUMERIC = re.compile(r"^numeric(?:\((-?\d+)(?:,(-?\d+))?\))?$")
_TIMESTAMP = re.compile(r"^timestamp(?:\(\d+\))? with(out)? time zone$")
#: A type modifier of one number: `varchar(20)`, `timestamp(3)`.
TYPMOD = re.compile(r"\(\s*\d+\s*\)")


def logical_type(declared: str, typtype: str = "b") -> tuple[LogicalType, str | None]:
    """Map a type as `format_type()` spells it to a logical type and a `read_as` template.

    `typtype` is the type's kind in pg_type ("c": composite). `read_as` is None when the
    column is read as is, else SQL with `{col}` standing for the quoted column: types
    without a logical counterpart are read as the text PostgreSQL prints for them,
    arrays and composites as JSON text, PostGIS values as extended WKB.

    >>> for t in ("bigint", "numeric(10,2)", "numeric", "numeric(5,-2)", "numeric(50,4)",
    ...           "character varying(20)", "timestamp(3) with time zone", "uuid", "integer[]",
    ...           "text[]", "inet", "cidr", "macaddr", "public.hstore", "citext",
    ...           "geometry(Point,4326)", "geography"):
    ...     kind, read_as = logical_type(t)
    ...     print(f"{t:28} {kind!s:15} {read_as}")
    bigint                       int             None
    numeric(10,2)                decimal(10,2)   None
    numeric                      text            CAST({col} AS TEXT)
    numeric(5,-2)                decimal(7,0)    None
    numeric(50,4)                text            CAST({col} AS TEXT)
    character varying(20)        text            None
    timestamp(3) with time zone  timestamptz     None
    uuid                         text            CAST({col} AS TEXT)
    integer[]                    text            CAST(ARRAY_TO_JSON({col}) AS TEXT)
    text[]                       text            CAST(ARRAY_TO_JSON({col}) AS TEXT)
    inet                         text            TEXTIN(INET_OUT({col}))
    cidr                         text            TEXTIN(CIDR_OUT({col}))
    macaddr                      text            CAST({col} AS TEXT)
    public.hstore                text            CAST(TO_JSON({col}) AS TEXT)
    citext                       text            None
    geometry(Point,4326)         bytes           ST_AsEWKB({col})
    geography                    bytes           ST_AsEWKB(CAST({col} AS geometry))
    >>> logical_type("address", "c")
    (LogicalType(kind='text', precision=0, scale=0), 'CAST(TO_JSON({col}) AS TEXT)')
    """
    t = declared.strip().lower()
    if t.endswith("]"):  # arrays, whatever the element type
        return LogicalType("text"), ARRAY_AS_JSON
    if typtype == COMPOSITE:
        return LogicalType("text"), AS_JSON
    base = TYPMOD.sub("", t).split(".")[-1].strip('"')  # `public.citext` -> `citext`
    base = base.split("(")[0].strip()  # `geometry(point,4326)` -> `geometry`
    if base in _INTEGERS:
        return LogicalType("int"), None
    if base in _FLOATS:
        return LogicalType("float"), None
    if base in _TEXTS:
        return LogicalType("text"), None
    if base in _SIMPLE:
        return LogicalType(_SIMPLE[base]), None
    if base in _OUTPUT_TEXT:
        return LogicalType("text"), _OUTPUT_TEXT[base]
    if base in _READ_AS:
        kind, read_as = _READ_AS[base]
        return LogicalType(kind), read_as
    match = _TIMESTAMP.match(t)
    if match:
        return LogicalType("timestamp" if match.group(1) else "timestamptz"), None
    match = _NUMERIC.match(t.replace(" ", ""))
    if match:
        if match.group(1) is None:  # any scale, NaN and infinities: the exact text PostgreSQL prints
            return LogicalType("text"), CAST_TO_TEXT
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        # Since PostgreSQL 15 the scale may be negative (rounding left of the point) or
        # exceed the precision (only digits right of the point): count both kinds of digits.
        digits = max(precision - scale, 0) + max(scale, 0)
        if digits <= MAX_DECIMAL_PRECISION:
            return LogicalType("decimal", digits, max(scale, 0)), None
        return LogicalType("text"), CAST_TO_TEXT  # too wide for Spark: exact text instead
    return LogicalType("text"), CAST_TO_TEXT
