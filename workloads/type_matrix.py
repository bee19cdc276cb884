"""The type matrix: for each source engine, its column types and what their edge values become.

One place that the documentation's type-matrix page (scripts/docs_gen.py) and the
round-trip test (tests/integration/test_type_matrix.py) both read. A row names a type as
written in CREATE TABLE and lists edge values, each as the SQL that writes it at the
source and the exact JSON value `GET /v1/views/{view}/rows` gives for it. How the type is
read, stored and published is not written here: the docs generator asks the code.

A row is one of two kinds:

- delivered (the default): every value reaches the view, its delta, the feed and both
  destinations as `Edge.json` says;
- `refused`: the code refuses the values on purpose, and the sync fails naming the table,
  the column, the row's key and the value; `refused` says why.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from typing import Any

ENGINES = ("sqlite", "postgres", "mariadb")

#: Length of the longest text and bytes values: far beyond any page or driver buffer, small
#: enough for the test's few copies to stay quick.
LONG = 100_000


@dataclass(frozen=True)
class Edge:
    """One edge value: `sql` writes it at the source, `json` is what the view's rows give
    (on a refused row: how the sync's error shows the value)."""

    what: str
    sql: str
    json: Any


@dataclass(frozen=True)
class Row:
    """One type of one engine and its edge values."""

    engine: str
    family: str
    declared: str
    edges: tuple[Edge, ...]
    #: Statements run once before the table is created (extensions, CREATE TYPE ...).
    setup: tuple[str, ...] = ()
    #: The extension the row needs (the test installs PostGIS when missing; the others ship with PostgreSQL).
    extension: str | None = None
    refused: str | None = None
    note: str = ""
    #: What the page shows for a value too long for a table cell (the longest values).
    shown: dict[int, str] = field(default_factory=dict)
    #: The type the adapter maps, where the catalog gives another than `declared` (a domain's base).
    maps_as: str | None = None

    @property
    def id(self) -> str:
        return f"{self.engine}-{self.family}"

    @property
    def column(self) -> str:
        return f"v_{self.family}"


def ewkb_point(x: float, y: float, srid: int = 0) -> str:
    """The base64 of a point as PostGIS's extended WKB (little-endian): plain WKB when
    `srid` is 0, else the type word OR 0x20000000 followed by the SRID.

    >>> base64.b64decode(ewkb_point(1, 2)).hex()[:10], base64.b64decode(ewkb_point(1, 2, 4326)).hex()[:18]
    ('0101000000', '0101000020e6100000')
    """
    if srid:
        head = struct.pack("<BII", 1, 1 | 0x20000000, srid)
    else:
        head = struct.pack("<BI", 1, 1)
    return base64.b64encode(head + struct.pack("<dd", x, y)).decode("ascii")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


NULL = Edge("NULL", "NULL", None)
NON_ASCII = "Grüße, Δ, 東京, 😀"
LONG_TEXT = "x" * LONG
LONG_BYTES = b"\xab" * LONG
_LONG_SHOWN = f"{LONG:,} characters"

SQLITE = (
    Row(
        "sqlite",
        "integer",
        "INTEGER",
        (
            Edge("min", "-9223372036854775808", -9223372036854775808),
            Edge("max", "9223372036854775807", 9223372036854775807),
            Edge("zero", "0", 0),
            Edge("integral real", "2.0", 2),
            NULL,
        ),
        note="SQLite's INTEGER affinity stores an integral REAL written to the column as an integer",
    ),
    Row(
        "sqlite",
        "real",
        "REAL",
        (
            Edge("max", "1.7976931348623157e308", 1.7976931348623157e308),
            Edge("smallest subnormal", "4.9406564584124654e-324", 5e-324),
            Edge("+Infinity", "9e999", "Infinity"),
            Edge("-Infinity", "-9e999", "-Infinity"),
            Edge("NaN (Infinity minus Infinity)", "9e999 - 9e999", None),
            NULL,
        ),
        note="SQLite stores no NaN: an expression giving NaN, or a NaN a program binds, is stored as NULL",
    ),
    Row(
        "sqlite",
        "text",
        "TEXT",
        (
            Edge("empty", "''", ""),
            Edge("non-ASCII", f"'{NON_ASCII}'", NON_ASCII),
            Edge("longest", f"replace(hex(zeroblob({LONG // 2})), '0', 'x')", LONG_TEXT),
            Edge("a number written to TEXT", "42", "42"),
            NULL,
        ),
        shown={2: _LONG_SHOWN},
    ),
    Row(
        "sqlite",
        "blob",
        "BLOB",
        (
            Edge("empty", "X''", ""),
            Edge("00 FF", "X'00FF'", "AP8="),
            Edge("longest", f"zeroblob({LONG})", _b64(bytes(LONG))),
            NULL,
        ),
        shown={2: f"{LONG:,} zero bytes"},
    ),
    Row(
        "sqlite",
        "numeric",
        "NUMERIC",
        (
            Edge("a decimal fraction", "'0.1'", "0.1000000000"),
            Edge("smallest step", "'-0.0000000001'", "-0.0000000001"),
            Edge("stored as REAL", "1.5", "1.5000000000"),
            Edge("stored as INTEGER", "123", "123.0000000000"),
            Edge(
                "beyond int64, made REAL by SQLite",
                "99999999999999999999999999",
                "100000000000000000000000000.0000000000",
            ),
            NULL,
        ),
        note=(
            "no precision given: decimal(38,10); SQLite's NUMERIC affinity itself stores a number of "
            "more than 15 significant digits as REAL, which is what reaches the view"
        ),
    ),
    Row(
        "sqlite",
        "decimal_10_2",
        "DECIMAL(10,2)",
        (
            Edge("max", "99999999.99", "99999999.99"),
            Edge("min", "-99999999.99", "-99999999.99"),
            Edge("zero", "0", "0.00"),
            NULL,
        ),
    ),
    Row("sqlite", "boolean", "BOOLEAN", (Edge("true", "1", True), Edge("false", "0", False), NULL)),
    Row(
        "sqlite",
        "date",
        "DATE",
        (
            Edge("min", "'0001-01-01'", "0001-01-01"),
            Edge("max", "'9999-12-31'", "9999-12-31"),
            Edge("leap day", "'2024-02-29'", "2024-02-29"),
            NULL,
        ),
    ),
    Row(
        "sqlite",
        "datetime",
        "DATETIME",
        (
            Edge("min", "'0001-01-01 00:00:00'", "0001-01-01T00:00:00"),
            Edge("max", "'9999-12-31 23:59:59.999999'", "9999-12-31T23:59:59.999999"),
            Edge("with an offset", "'2024-06-01 12:00:00+02:00'", "2024-06-01T10:00:00"),
            NULL,
        ),
        note="an offset written in the text is applied: the value is the UTC time",
    ),
    Row(
        "sqlite",
        "untyped",
        "",
        (
            Edge("integer", "42", "42"),
            Edge("real", "1.5", "1.5"),
            Edge("UTF-8 blob", "X'C3BC'", "ü"),
            Edge("text", "'x'", "x"),
            NULL,
        ),
        note="a column declared without a type is text: numbers as their text, blobs as UTF-8",
    ),
    Row(
        "sqlite",
        "integer_text",
        "INTEGER",
        (Edge("text in an INTEGER column", "'abc'", "'abc'"),),
        refused="the value cannot be read as an integer",
    ),
    Row(
        "sqlite",
        "numeric_wide",
        "NUMERIC",
        (Edge("beyond decimal(38,10)", "'1e40'", "1e+40"),),
        refused="the value does not fit decimal(38,10), the widest decimal Spark stores",
    ),
    Row(
        "sqlite",
        "date_text",
        "DATE",
        (Edge("not a date", "'yesterday'", "'yesterday'"),),
        refused="the value cannot be read as a date",
    ),
    Row(
        "sqlite",
        "text_bytes",
        "TEXT",
        (Edge("a blob that is not UTF-8", "X'FF'", "b'\\xff'"),),
        refused="a blob in a text column is read as UTF-8, which this one is not",
    ),
)

POSTGRES = (
    Row(
        "postgres",
        "smallint",
        "smallint",
        (Edge("min", "-32768", -32768), Edge("max", "32767", 32767), NULL),
    ),
    Row(
        "postgres",
        "integer",
        "integer",
        (Edge("min", "-2147483648", -2147483648), Edge("max", "2147483647", 2147483647), NULL),
    ),
    Row(
        "postgres",
        "bigint",
        "bigint",
        (
            Edge("min", "-9223372036854775808", -9223372036854775808),
            Edge("max", "9223372036854775807", 9223372036854775807),
            Edge("zero", "0", 0),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "real",
        "real",
        (
            Edge("max", "3.4028235e38", 3.4028235e38),
            Edge("a decimal fraction", "0.1", 0.1),
            Edge("NaN", "'NaN'", "NaN"),
            Edge("+Infinity", "'Infinity'", "Infinity"),
            Edge("-Infinity", "'-Infinity'", "-Infinity"),
            NULL,
        ),
        note="a real is read as its shortest decimal text, so 0.1 stays 0.1",
    ),
    Row(
        "postgres",
        "double",
        "double precision",
        (
            Edge("max", "1.7976931348623157e308", 1.7976931348623157e308),
            Edge("smallest subnormal", "5e-324", 5e-324),
            Edge("NaN", "'NaN'", "NaN"),
            Edge("+Infinity", "'Infinity'", "Infinity"),
            Edge("-Infinity", "'-Infinity'", "-Infinity"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "numeric_38_10",
        "numeric(38,10)",
        (
            Edge("max", "9999999999999999999999999999.9999999999", "9999999999999999999999999999.9999999999"),
            Edge("smallest step", "-0.0000000001", "-0.0000000001"),
            Edge("zero", "0", "0.0000000000"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "numeric_50_4",
        "numeric(50,4)",
        (
            Edge(
                "beyond Spark's 38 digits",
                "1234567890123456789012345678901234567890123456.7891",
                "1234567890123456789012345678901234567890123456.7891",
            ),
            Edge("scale kept", "1.5", "1.5000"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "numeric",
        "numeric",
        (
            Edge("wide", "12345678901234567890.123456789012345", "12345678901234567890.123456789012345"),
            Edge("NaN", "'NaN'", "NaN"),
            Edge("+Infinity", "'Infinity'", "Infinity"),
            Edge("-Infinity", "'-Infinity'", "-Infinity"),
            Edge("scale as written", "1.50", "1.50"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "text",
        "text",
        (
            Edge("empty", "''", ""),
            Edge("non-ASCII", f"'{NON_ASCII}'", NON_ASCII),
            Edge("longest", f"repeat('x', {LONG})", LONG_TEXT),
            NULL,
        ),
        shown={2: _LONG_SHOWN},
    ),
    Row("postgres", "varchar", "varchar(8)", (Edge("full", "'abcdefgh'", "abcdefgh"), Edge("empty", "''", ""), NULL)),
    Row(
        "postgres",
        "char",
        "char(4)",
        (Edge("padded", "'ab'", "ab  "), Edge("full", "'abcd'", "abcd"), NULL),
        note="char(n) keeps the blanks PostgreSQL pads it with",
    ),
    Row(
        "postgres",
        "citext",
        "citext",
        (Edge("mixed case", "'MiXeD'", "MiXeD"), Edge("non-ASCII", "'Ärger'", "Ärger"), NULL),
        setup=("CREATE EXTENSION IF NOT EXISTS citext",),
        extension="citext",
    ),
    Row(
        "postgres",
        "bytea",
        "bytea",
        (
            Edge("empty", "''::bytea", ""),
            Edge("00 FF", "'\\x00ff'::bytea", "AP8="),
            Edge("longest", f"decode(repeat('ab', {LONG}), 'hex')", _b64(LONG_BYTES)),
            NULL,
        ),
        shown={2: f"{LONG:,} bytes 0xAB"},
    ),
    Row("postgres", "boolean", "boolean", (Edge("true", "true", True), Edge("false", "false", False), NULL)),
    Row(
        "postgres",
        "date",
        "date",
        (
            Edge("min", "'0001-01-01'", "0001-01-01"),
            Edge("max", "'9999-12-31'", "9999-12-31"),
            Edge("leap day", "'2024-02-29'", "2024-02-29"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "timestamp",
        "timestamp without time zone",
        (
            Edge("min", "'0001-01-01 00:00:00'", "0001-01-01T00:00:00"),
            Edge("max", "'9999-12-31 23:59:59.999999'", "9999-12-31T23:59:59.999999"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "timestamptz",
        "timestamp with time zone",
        (
            Edge("with an offset", "'2024-06-01 12:00:00+02'", "2024-06-01T10:00:00+00:00"),
            Edge("min", "'0001-01-01 00:00:00+00'", "0001-01-01T00:00:00+00:00"),
            Edge("max", "'9999-12-31 23:59:59.999999+00'", "9999-12-31T23:59:59.999999+00:00"),
            NULL,
        ),
        note="the instant, in UTC",
    ),
    Row(
        "postgres",
        "time",
        "time without time zone",
        (Edge("max", "'24:00:00'", "24:00:00"), Edge("micro", "'23:59:59.999999'", "23:59:59.999999"), NULL),
    ),
    Row("postgres", "timetz", "time with time zone", (Edge("offset", "'12:00:00+05:30'", "12:00:00+05:30"), NULL)),
    Row(
        "postgres",
        "interval",
        "interval",
        (
            Edge("mixed", "'1 year 2 months 3 days 04:05:06.789'", "1 year 2 mons 3 days 04:05:06.789"),
            Edge("negative", "'-178000000 years'", "-178000000 years"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "money",
        "money",
        (
            Edge("min", "'-92233720368547758.08'", "-$92,233,720,368,547,758.08"),
            Edge("max", "'92233720368547758.07'", "$92,233,720,368,547,758.07"),
            NULL,
        ),
        note="as lc_monetary prints it (the server's C locale here)",
    ),
    Row(
        "postgres",
        "uuid",
        "uuid",
        (Edge("any", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), NULL),
    ),
    Row(
        "postgres",
        "json",
        "json",
        (Edge("as written", """'{"b": 1,  "a": [1, 2.50]}'""", '{"b": 1,  "a": [1, 2.50]}'), NULL),
        note="json keeps its text as written",
    ),
    Row(
        "postgres",
        "jsonb",
        "jsonb",
        (
            Edge("normalized", """'{"b": 1,  "a": [1, 2.50]}'""", '{"a": [1, 2.50], "b": 1}'),
            Edge("non-ASCII", """'{"k": "東京"}'""", '{"k": "東京"}'),
            Edge("JSON null", "'null'", "null"),
            NULL,
        ),
        note="jsonb as PostgreSQL prints it: keys sorted, spacing normalized",
    ),
    Row("postgres", "name", "name", (Edge("longest", "'" + "n" * 63 + "'", "n" * 63), NULL)),
    Row("postgres", "oid", "oid", (Edge("max", "4294967295", "4294967295"), Edge("zero", "0", "0"))),
    Row("postgres", "xml", "xml", (Edge("any", "'<a>ü</a>'", "<a>ü</a>"), NULL)),
    Row("postgres", "tsvector", "tsvector", (Edge("any", "'a fat cat'", "'a' 'cat' 'fat'"), NULL)),
    Row(
        "postgres",
        "int4range",
        "int4range",
        (Edge("bounded", "'[1,10)'", "[1,10)"), Edge("empty", "'empty'", "empty"), Edge("unbounded", "'(,5]'", "(,6)")),
        note="ranges of integers in their canonical form",
    ),
    Row(
        "postgres",
        "tstzrange",
        "tstzrange",
        (
            Edge(
                "bounded",
                "'[2024-01-01 00:00+00,2024-02-01 00:00+00)'",
                '["2024-01-01 00:00:00+00","2024-02-01 00:00:00+00")',
            ),
        ),
    ),
    Row("postgres", "macaddr", "macaddr", (Edge("any", "'08:00:2B:01:02:03'", "08:00:2b:01:02:03"), NULL)),
    Row("postgres", "bit", "bit(8)", (Edge("any", "B'10101010'", "10101010"), NULL)),
    Row("postgres", "varbit", "bit varying(16)", (Edge("empty", "B''", ""), Edge("some", "B'101'", "101"))),
    Row("postgres", "point", "point", (Edge("any", "'(1.5,-2)'", "(1.5,-2)"), NULL)),
    Row(
        "postgres",
        "enum",
        "mood",
        (Edge("a label", "'happy'", "happy"), Edge("non-ASCII label", "'müde'", "müde"), NULL),
        setup=("CREATE TYPE mood AS ENUM ('sad', 'happy', 'müde')",),
    ),
    Row(
        "postgres",
        "domain",
        "posint",
        (Edge("min", "1", 1), Edge("max", "2147483647", 2147483647), NULL),
        setup=("CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",),
        maps_as="integer",
        note="a domain is read as the type at the bottom of its chain",
    ),
    Row(
        "postgres",
        "inet",
        "inet",
        (Edge("host", "'10.0.1.1'", "10.0.1.1"), Edge("network", "'10.0.0.0/8'", "10.0.0.0/8"), NULL),
    ),
    Row("postgres", "cidr", "cidr", (Edge("network", "'10.0.0.0/8'", "10.0.0.0/8"), NULL)),
    Row(
        "postgres",
        "composite",
        "pair",
        (Edge("a value", "ROW(1, 'b1')", '{"a":1,"b":"b1"}'), NULL),
        setup=("CREATE TYPE pair AS (a integer, b text)",),
    ),
    Row(
        "postgres",
        "text_array",
        "text[]",
        (
            Edge("with NULL and a comma", """'{a1,NULL,"c,d"}'""", '["a1",null,"c,d"]'),
            Edge("empty", "'{}'", "[]"),
            NULL,
        ),
    ),
    Row(
        "postgres",
        "int_array_2d",
        "integer[][]",
        (Edge("two dimensions", "'{{1,2},{3,NULL}}'", "[[1,2],[3,null]]"), NULL),
    ),
    Row(
        "postgres",
        "hstore",
        "hstore",
        (Edge("with NULL", """'"a"=>"1", "b"=>NULL'""", '{"a": "1", "b": null}'), NULL),
        setup=("CREATE EXTENSION IF NOT EXISTS hstore",),
        extension="hstore",
    ),
    Row(
        "postgres",
        "geometry",
        "geometry",
        (
            Edge("a point", "ST_GeomFromText('POINT(1 2)')", ewkb_point(1, 2)),
            Edge("with an SRID", "ST_GeomFromText('POINT(1 2)', 4326)", ewkb_point(1, 2, 4326)),
            NULL,
        ),
        setup=("CREATE EXTENSION IF NOT EXISTS postgis",),
        extension="postgis",
    ),
    Row(
        "postgres",
        "date_infinity",
        "date",
        (Edge("infinity", "'infinity'", "'infinity'"),),
        refused="Python's dates end at 9999-12-31: 'infinity' has no date to become",
    ),
    Row(
        "postgres",
        "timestamp_bc",
        "timestamp without time zone",
        (Edge("before year 1", "'4713-01-01 00:00:00 BC'", "'4713-01-01 00:00:00 BC'"),),
        refused="Python's timestamps start at year 1",
    ),
)

#: Statements every MariaDB connection of the test runs first: zero dates allowed, UTC.
MARIADB_SESSION = ("SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'")

MARIADB = (
    Row("mariadb", "tinyint", "TINYINT", (Edge("min", "-128", -128), Edge("max", "127", 127), NULL)),
    Row("mariadb", "tinyint_unsigned", "TINYINT UNSIGNED", (Edge("max", "255", 255), Edge("min", "0", 0), NULL)),
    Row("mariadb", "smallint", "SMALLINT", (Edge("min", "-32768", -32768), Edge("max", "32767", 32767), NULL)),
    Row(
        "mariadb", "int", "INT", (Edge("min", "-2147483648", -2147483648), Edge("max", "2147483647", 2147483647), NULL)
    ),
    Row("mariadb", "mediumint", "MEDIUMINT", (Edge("min", "-8388608", -8388608), Edge("max", "8388607", 8388607))),
    Row(
        "mariadb",
        "int_unsigned",
        "INT UNSIGNED",
        (Edge("max", "4294967295", 4294967295), NULL),
    ),
    Row(
        "mariadb",
        "bigint",
        "BIGINT",
        (
            Edge("min", "-9223372036854775808", -9223372036854775808),
            Edge("max", "9223372036854775807", 9223372036854775807),
            NULL,
        ),
    ),
    Row(
        "mariadb",
        "bigint_unsigned",
        "BIGINT UNSIGNED",
        (Edge("max", "18446744073709551615", "18446744073709551615"), Edge("zero", "0", "0"), NULL),
        note="beyond bigint: an exact decimal(20,0)",
    ),
    Row(
        "mariadb",
        "float",
        "FLOAT",
        (Edge("a binary fraction", "1.5", 1.5), Edge("max", "3.40282e38", 3.40282e38), NULL),
        note="MariaDB stores no NaN or infinity",
    ),
    Row(
        "mariadb",
        "double",
        "DOUBLE",
        (
            Edge("max", "1.7976931348623157e308", 1.7976931348623157e308),
            Edge("min", "-1.7976931348623157e308", -1.7976931348623157e308),
            Edge("smallest normal", "2.2250738585072014e-308", 2.2250738585072014e-308),
            NULL,
        ),
    ),
    Row(
        "mariadb",
        "decimal_10_2",
        "DECIMAL(10,2)",
        (Edge("max", "99999999.99", "99999999.99"), Edge("step", "-0.01", "-0.01"), NULL),
    ),
    Row(
        "mariadb",
        "decimal_38_10",
        "DECIMAL(38,10)",
        (
            Edge("max", "'9999999999999999999999999999.9999999999'", "9999999999999999999999999999.9999999999"),
            Edge("step", "-0.0000000001", "-0.0000000001"),
            Edge("zero", "0", "0.0000000000"),
        ),
        note="the widest decimal Spark stores",
    ),
    Row(
        "mariadb",
        "decimal_65_30",
        "DECIMAL(65,30)",
        (
            Edge("max", "'" + "9" * 35 + "." + "9" * 30 + "'", "9" * 35 + "." + "9" * 30),
            Edge("step", "'-0." + "0" * 29 + "1'", "-0." + "0" * 29 + "1"),
            NULL,
        ),
        note="beyond Spark's 38 digits: exact text",
    ),
    Row(
        "mariadb",
        "char",
        "CHAR(4)",
        (Edge("padded", "'ab'", "ab"), Edge("empty", "''", ""), NULL),
        note="MariaDB strips CHAR's padding when it reads",
    ),
    Row(
        "mariadb",
        "varchar_utf8mb4",
        "VARCHAR(64) CHARACTER SET utf8mb4",
        (Edge("non-ASCII", f"'{NON_ASCII}'", NON_ASCII), Edge("empty", "''", ""), NULL),
    ),
    Row(
        "mariadb",
        "varchar_latin1",
        "VARCHAR(64) CHARACTER SET latin1",
        (Edge("non-ASCII", "'Grüße, ½'", "Grüße, ½"), NULL),
    ),
    Row(
        "mariadb",
        "longtext",
        "LONGTEXT",
        (Edge("longest", f"REPEAT('x', {LONG})", LONG_TEXT), Edge("empty", "''", ""), NULL),
        shown={0: _LONG_SHOWN},
    ),
    Row(
        "mariadb",
        "binary",
        "BINARY(16)",
        (
            Edge("padded", "X'00FF'", _b64(b"\x00\xff" + bytes(14))),
            Edge("full", "X'" + "AB" * 16 + "'", _b64(b"\xab" * 16)),
        ),
        note="BINARY(n) pads with zero bytes, which are part of the value",
    ),
    Row("mariadb", "text", "TEXT", (Edge("non-ASCII", f"'{NON_ASCII}'", NON_ASCII), Edge("empty", "''", ""), NULL)),
    Row("mariadb", "varbinary", "VARBINARY(8)", (Edge("empty", "X''", ""), Edge("00 FF", "X'00FF'", "AP8="), NULL)),
    Row(
        "mariadb",
        "longblob",
        "LONGBLOB",
        (Edge("longest", f"REPEAT(X'AB', {LONG})", _b64(LONG_BYTES)), Edge("empty", "X''", ""), NULL),
        shown={0: f"{LONG:,} bytes 0xAB"},
    ),
    Row("mariadb", "bit_1", "BIT(1)", (Edge("one", "b'1'", True), Edge("zero", "b'0'", False), NULL)),
    Row(
        "mariadb",
        "bit_64",
        "BIT(64)",
        (Edge("all ones", "b'" + "1" * 64 + "'", "18446744073709551615"), Edge("zero", "b'0'", "0"), NULL),
    ),
    Row("mariadb", "year", "YEAR", (Edge("min", "1901", 1901), Edge("max", "2155", 2155), Edge("zero", "0", 0))),
    Row(
        "mariadb",
        "date",
        "DATE",
        (
            Edge("min", "'1000-01-01'", "1000-01-01"),
            Edge("max", "'9999-12-31'", "9999-12-31"),
            Edge("zero date", "'0000-00-00'", None),
            NULL,
        ),
        note="a zero date reads as NULL",
    ),
    Row(
        "mariadb",
        "datetime_6",
        "DATETIME(6)",
        (
            Edge("min", "'1000-01-01 00:00:00'", "1000-01-01T00:00:00"),
            Edge("max", "'9999-12-31 23:59:59.999999'", "9999-12-31T23:59:59.999999"),
            Edge("zero date", "'0000-00-00 00:00:00'", None),
            NULL,
        ),
    ),
    Row(
        "mariadb",
        "timestamp",
        "TIMESTAMP NULL",
        (
            Edge("min", "'1970-01-01 00:00:01'", "1970-01-01T00:00:01+00:00"),
            Edge("max", "'2038-01-19 03:14:07'", "2038-01-19T03:14:07+00:00"),
            Edge("zero date", "'0000-00-00 00:00:00'", None),
            NULL,
        ),
        note="the instant, in UTC",
    ),
    Row(
        "mariadb",
        "time",
        "TIME",
        (
            Edge("min", "'-838:59:59'", "-838:59:59"),
            Edge("max", "'838:59:59'", "838:59:59"),
            Edge("zero", "'0:0:0'", "00:00:00"),
        ),
        note="TIME spans more than a day and may be negative: its text",
    ),
    Row(
        "mariadb",
        "enum",
        "ENUM('a','b','ü')",
        (Edge("non-ASCII", "'ü'", "ü"), Edge("first", "'a'", "a"), NULL),
    ),
    Row("mariadb", "set", "SET('x','y')", (Edge("two", "'x,y'", "x,y"), Edge("none", "''", ""), NULL)),
    Row(
        "mariadb",
        "json",
        "JSON",
        (Edge("as written", """'{"b": 1,  "a": [1, 2.50]}'""", '{"b": 1,  "a": [1, 2.50]}'), NULL),
        note="MariaDB's JSON is LONGTEXT with a check: the text as written",
    ),
    Row(
        "mariadb",
        "geometry",
        "GEOMETRY",
        (
            Edge("a point", "ST_GeomFromText('POINT(1 2)')", ewkb_point(1, 2)),
            Edge("with an SRID", "ST_GeomFromText('POINT(1 2)', 4326)", ewkb_point(1, 2, 4326)),
            NULL,
        ),
    ),
    Row("mariadb", "point", "POINT", (Edge("a point", "POINT(1, 2)", ewkb_point(1, 2)), NULL)),
)

ROWS: tuple[Row, ...] = SQLITE + POSTGRES + MARIADB


def rows(engine: str) -> tuple[Row, ...]:
    """The matrix's rows of one engine, in the page's order.

    >>> {row.engine for row in rows("sqlite")}
    {'sqlite'}
    """
    return tuple(row for row in ROWS if row.engine == engine)
