"""A directory of dump files: which tables it holds, their layout, and each table's dumps.

A legacy system that grants no database login often drops periodic exports in a directory.
Each table of such a directory is described once, by `TABLE.table.json`, and dumped again
and again as `TABLE.STAMP.EXT`:

    customers.table.json            the description (columns, types, key, layout)
    customers.2026-11-24.csv.gz     a dump; STAMP is any text without dots that sorts
    customers.2026-11-25.csv.gz     in time order (ISO dates or times): the greatest is
                                    the table's current state

EXT follows the description's `format`: `csv` (`.csv`, `.csv.gz`), `fixed` (fixed-width
records: `.txt`, `.dat`, either `.gz`) or `parquet` (`.parquet`). Any other file is not a
dump (so a writer that writes `customers.2026-11-26.csv.gz.part` and renames it when done is
never read half-written). A description:

    {"format": "csv", "key": ["id"],
     "columns": [{"name": "id", "type": "int", "nullable": false},
                 {"name": "name", "type": "text"},
                 {"name": "balance", "type": "decimal(12,2)"}],
     "csv": {"delimiter": ",", "header": true, "null": "", "quote": "\\""}}

`key` may be empty or left out (a table without a key). For `fixed`, every column has a
`width` (characters; columns follow each other, or give `start`, 1-based), values are
trimmed and an empty field is NULL. Types are the agent's logical types (`int`, `float`,
`decimal(P,S)`, `text`, `bytes`, `bool`, `date`, `timestamp`, `timestamptz`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from deltasieve_protocol.schema import ColumnInfo, TableInfo
from deltasieve_protocol.types import LogicalType
from remote_agent.errors import SourceDataError, SourceUnavailable

DESCRIPTION_SUFFIX = ".table.json"
#: Dump extensions of each format.
EXTENSIONS = {
    "csv": ("csv", "csv.gz"),
    "fixed": ("txt", "txt.gz", "dat", "dat.gz"),
    "parquet": ("parquet",),
}
_STAMP = re.compile(r"^[A-Za-z0-9_:+\-]+$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: DuckDB's name of each logical type.
DUCKDB_TYPES = {
    "int": "BIGINT",
    "float": "DOUBLE",
    "text": "VARCHAR",
    "bytes": "BLOB",
    "bool": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMPTZ",
}


def duckdb_type(type_: LogicalType) -> str:
    """The DuckDB type a column of `type_` is read as.

    >>> duckdb_type(LogicalType.parse("decimal(12,2)")), duckdb_type(LogicalType("int"))
    ('DECIMAL(12,2)', 'BIGINT')
    """
    if type_.kind == "decimal":
        return f"DECIMAL({type_.precision},{type_.scale})"
    return DUCKDB_TYPES[type_.kind]


def literal(text: str) -> str:
    """`text` as an SQL string literal.

    >>> literal("it's")
    "'it''s'"
    """
    return "'" + text.replace("'", "''") + "'"


def quoted(name: str) -> str:
    """`name` as a quoted SQL identifier.

    >>> quoted('a"b')
    '"a""b"'
    """
    return '"' + name.replace('"', '""') + '"'


def dump_stamp(table: str, file_name: str, fmt: str) -> str | None:
    """The stamp of `file_name` if it is a dump of `table` in format `fmt`, else None.

    >>> dump_stamp("customers", "customers.2026-11-24.csv.gz", "csv")
    '2026-11-24'
    >>> [dump_stamp("customers", n, "csv") for n in ("customers.2026-11-24.csv.part", "customers.table.json", "customers_x.1.csv")]
    [None, None, None]
    """
    prefix = table + "."
    if not file_name.startswith(prefix):
        return None
    rest = file_name[len(prefix) :]
    for ext in sorted(EXTENSIONS[fmt], key=len, reverse=True):
        if rest.endswith("." + ext):
            stamp = rest[: -len(ext) - 1]
            return stamp if _STAMP.match(stamp) else None
    return None


@dataclass(frozen=True)
class Layout:
    """How one table's dumps are written (from its description file)."""

    name: str
    columns: tuple[ColumnInfo, ...]
    key: tuple[str, ...]
    format: str = "csv"
    csv: dict = field(default_factory=dict)
    #: fixed-width: (start, width) of each column, 1-based
    fields: tuple[tuple[int, int], ...] = ()

    def info(self) -> TableInfo:
        return TableInfo(self.name, self.columns, self.key)

    def reader_sql(self, path: Path) -> str:
        """A DuckDB SELECT of every column of the dump at `path`, typed, in file order.

        >>> lay = parse_description("t", {"key": ["id"], "columns": [{"name": "id", "type": "int"}]})
        >>> lay.reader_sql(Path("/d/t.1.csv"))
        'SELECT "id" FROM read_csv(\\'/d/t.1.csv\\', header=true, delim=\\',\\', quote=\\'"\\', nullstr=\\'\\', auto_detect=false, columns={\\'id\\': \\'BIGINT\\'})'
        """
        names = ", ".join(quoted(c.name) for c in self.columns)
        if self.format == "parquet":
            casts = ", ".join(
                f"CAST({quoted(c.name)} AS {duckdb_type(c.type)}) AS {quoted(c.name)}" for c in self.columns
            )
            return f"SELECT {casts} FROM read_parquet({literal(str(path))})"
        if self.format == "fixed":
            cells = ", ".join(
                f"CAST(NULLIF(trim(substr(line, {start}, {width})), '') AS {duckdb_type(c.type)}) AS {quoted(c.name)}"
                for c, (start, width) in zip(self.columns, self.fields, strict=True)
            )
            # one VARCHAR per line: a separator and quote that cannot occur in text
            source = (
                f"read_csv({literal(str(path))}, header=false, delim=E'\\x1f', quote='', escape='', "
                "auto_detect=false, columns={'line': 'VARCHAR'})"
            )
            return f"SELECT {cells} FROM {source}"
        opts = self.csv
        types = ", ".join(f"{literal(c.name)}: {literal(duckdb_type(c.type))}" for c in self.columns)
        source = (
            f"read_csv({literal(str(path))}, header={'true' if opts.get('header', True) else 'false'}, "
            f"delim={literal(opts.get('delimiter', ','))}, quote={literal(opts.get('quote', chr(34)))}, "
            f"nullstr={literal(opts.get('null', ''))}, auto_detect=false, columns={{{types}}})"
        )
        return f"SELECT {names} FROM {source}"


def parse_description(table: str, data: object) -> Layout:
    """The layout a description file gives, or SourceDataError saying what is wrong with it.

    >>> lay = parse_description("t", {"format": "fixed", "columns": [{"name": "a", "type": "int", "width": 4},
    ...                                                             {"name": "b", "type": "text", "width": 6}]})
    >>> lay.fields, lay.key
    (((1, 4), (5, 6)), ())
    >>> parse_description("t", {"columns": [{"name": "a", "type": "money"}]})
    Traceback (most recent call last):
    ...
    remote_agent.errors.SourceDataError: t.table.json: column 'a': unknown logical type 'money'; supported: int, float, decimal, text, bytes, bool, date, timestamp, timestamptz
    """
    where = f"{table}{DESCRIPTION_SUFFIX}"
    if not isinstance(data, dict) or not isinstance(data.get("columns"), list) or not data["columns"]:
        raise SourceDataError(f"{where}: expected an object with a non-empty list of columns")
    fmt = data.get("format", "csv")
    if fmt not in EXTENSIONS:
        raise SourceDataError(f"{where}: format {fmt!r} is not one of {', '.join(EXTENSIONS)}")
    columns, fields, at = [], [], 1
    for spec in data["columns"]:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not _NAME.match(spec["name"]):
            raise SourceDataError(f"{where}: each column is an object with a name (letters, digits, _): got {spec!r}")
        name = spec["name"]
        try:
            type_ = LogicalType.parse(str(spec.get("type", "")))
        except ValueError as exc:
            raise SourceDataError(f"{where}: column {name!r}: {exc}") from None
        nullable = bool(spec.get("nullable", True))
        columns.append(ColumnInfo(name, type_, nullable=nullable, declared=duckdb_type(type_)))
        if fmt == "fixed":
            width = spec.get("width")
            start = spec.get("start", at)
            if not isinstance(width, int) or width < 1 or not isinstance(start, int) or start < 1:
                raise SourceDataError(
                    f"{where}: column {name!r} of a fixed-width table needs a positive width (and start)"
                )
            fields.append((start, width))
            at = start + width
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise SourceDataError(f"{where}: a column name appears twice")
    key = data.get("key") or []
    if not isinstance(key, list) or any(k not in names for k in key) or len(set(key)) != len(key):
        raise SourceDataError(f"{where}: key must list some of the columns {names}, each once; got {key!r}")
    csv = data.get("csv", {})
    if not isinstance(csv, dict) or not set(csv) <= {"delimiter", "header", "null", "quote"}:
        raise SourceDataError(f"{where}: csv options are delimiter, header, null and quote; got {csv!r}")
    if len(csv.get("delimiter", ",")) != 1:
        raise SourceDataError(f"{where}: the csv delimiter is one character")
    keyed = set(key)
    columns = [ColumnInfo(c.name, c.type, c.nullable and c.name not in keyed, c.declared) for c in columns]
    return Layout(table, tuple(columns), tuple(key), fmt, csv, tuple(fields))


class DumpDir:
    """The tables of one directory of dumps (read only: the agent never writes there)."""

    def __init__(self, path: Path):
        self.path = path

    def layouts(self) -> dict[str, Layout]:
        """Every described table, by name."""
        if not self.path.is_dir():
            raise SourceUnavailable(f"dump directory {self.path} does not exist")
        out = {}
        for desc in sorted(self.path.glob("*" + DESCRIPTION_SUFFIX)):
            table = desc.name[: -len(DESCRIPTION_SUFFIX)]
            if not _NAME.match(table):
                continue
            try:
                data = json.loads(desc.read_text())
            except (OSError, ValueError) as exc:
                raise SourceDataError(f"{desc.name} cannot be read as JSON: {exc}") from None
            out[table] = parse_description(table, data)
        return out

    def dumps(self, layout: Layout) -> list[str]:
        """The file names of `layout`'s dumps, oldest first (by stamp)."""
        found = []
        for entry in self.path.iterdir():
            stamp = dump_stamp(layout.name, entry.name, layout.format)
            if stamp is not None and entry.is_file():
                found.append((stamp, entry.name))
        return [name for _, name in sorted(found)]

    def newest(self, layout: Layout) -> str:
        """The current dump of a table (SourceUnavailable when there is none yet)."""
        names = self.dumps(layout)
        if not names:
            exts = " or ".join("." + e for e in EXTENSIONS[layout.format])
            raise SourceUnavailable(
                f"no dump of table {layout.name!r} in {self.path} yet (expected {layout.name}.STAMP{exts})"
            )
        return names[-1]
