"""The SQLite adapter's Arrow reads (adbc-driver-sqlite): cell for cell the batches of sqlite3's rows, or sqlite3's path."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote_agent import chunks
from remote_agent.adapters import open_adapter, sqlite_arrow
from remote_agent.adapters import sqlite as sqlite_adapter
from remote_agent.adapters.rows import RowConverter
from remote_agent.adapters.sqlite import SqliteAdapter
from remote_agent.errors import SourceDataError
from remote_agent.sitequery import validate_site_query

ROWS = 120

SCHEMA = """
CREATE TABLE vals (
    id INTEGER PRIMARY KEY, i INTEGER, r REAL, n DECIMAL(6,2), wide NUMERIC, t TEXT, b BLOB,
    ok BOOLEAN, day DATE, at DATETIME, at_tz TIMESTAMPTZ, loose, code TEXT
);
CREATE TABLE words (w TEXT PRIMARY KEY, v INTEGER);
"""


def _row(i: int) -> tuple:
    """Every type, with NULLs, big integers, -0.0, empty strings and blobs, unicode and dates as text."""
    return (
        i,
        [None, 2**62 + i, -(2**63), 2**53 + 1, 0][i % 5],
        [None, -0.0, 0.1, 1e308, float("inf"), -1.5e-300][i % 6],
        [None, 1.25, -0.1, 9999.99, 7][i % 5],
        [None, 0.5, 12345678901234, 0.0000000001][i % 4],
        [None, "", "naïve ☃", 'a\nb"c,d', "x" * 300][i % 5],
        [None, b"", b"\x00\xff", bytes(range(256))][i % 4],
        [None, 1, 0][i % 3],
        [None, "2024-02-29", "0001-01-01", "9999-12-31"][i % 4],
        [None, "2024-03-01 12:30:45.123456", "2024-03-01T12:00", "0001-01-01", "9999-12-31 23:59:59.9"][i % 5],
        [None, "2024-03-01 12:30:45", "2024-03-01"][i % 3],
        [None, 3, 2.5, "text", b"blob"][i % 5],
        f"c{i}",
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("sqlite_arrow") / "vals.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA)
        conn.executemany(f"INSERT INTO vals VALUES ({','.join('?' * 13)})", [_row(i) for i in range(1, ROWS + 1)])
        conn.executemany("INSERT INTO words VALUES (?, ?)", [(f"w{i:03d}", i) for i in range(50)])
    return path


def _scan(
    path, sql: str, key: list[str], *, arrow: bool, chunk_rows: int = 25, timeout_s: float = 5
) -> tuple[pa.Table, list[bool]]:
    """The site query's batches, and for each chunk whether the Arrow path read it."""
    adapter = SqliteAdapter(f"sqlite:///{path}", statement_timeout_s=timeout_s, arrow_reads=arrow)
    query = validate_site_query(sql, key, {t.name: t for t in adapter.describe()}, "sqlite")
    converter = RowConverter(adapter, query.columns)
    with adapter.session() as session:
        parts = list(chunks.scan(adapter, session, query, chunk_rows, arrow=converter))
    tables = [p if isinstance(p, pa.Table) else pa.Table.from_batches([converter.batch(p, query.key)]) for p in parts]
    return pa.concat_tables(tables), [isinstance(p, pa.Table) for p in parts]


def _same(path, sql: str, key: list[str], **kwargs) -> list[bool]:
    (arrow, used), (rows, _) = _scan(path, sql, key, arrow=True, **kwargs), _scan(path, sql, key, arrow=False, **kwargs)
    assert arrow.schema == rows.schema
    # repr: NaN equals itself, -0.0 differs from 0.0, 1 from True, Decimal('1.2') from Decimal('1.20')
    assert repr(arrow.to_pylist()) == repr(rows.to_pylist())
    assert arrow.num_rows == rows.num_rows > 0
    return used


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT v.id, v.i, v.r, v.n, v.t, v.b, v.ok, v.day, v.at, v.at_tz, v.code FROM vals v",
        "SELECT v.id, v.wide FROM vals v",  # 0.0000000001: the converter's call, exact at scale 10
        "SELECT v.id, v.loose FROM vals v",  # every storage class in one column
        "SELECT v.id, v.at, v.at_tz FROM vals v",
        "SELECT v.id, v.t FROM vals v WHERE v.t IS NULL",  # NULLs only
    ],
)
def test_every_chunk_equals_sqlite3_rows_cell_for_cell(db, sql):
    _same(db, sql, ["id"])


def test_the_arrow_path_reads_the_chunks_it_can_after_the_first(db):
    used = _same(db, "SELECT v.id, v.i, v.r, v.n, v.t, v.b, v.ok, v.day, v.at, v.at_tz, v.code FROM vals v", ["id"])
    assert used == [False, True, True, True, True]  # the first chunk: sqlite3's, under the statement timeout
    assert _same(db, "SELECT v.id, v.at, v.at_tz FROM vals v", ["id"]) == [False, True, True, True, True]
    assert not any(_same(db, "SELECT v.id, v.wide FROM vals v", ["id"]))  # 0.0000000001: the converter's call
    # a text key the next chunk binds back as it was read
    assert _same(db, "SELECT w.w, w.v FROM words w", ["w"], chunk_rows=10)[1:] == [True] * 4


def test_chunks_stay_with_sqlite3_when_a_read_took_a_quarter_of_the_timeout(db):
    # the driver cannot interrupt a statement: only sqlite3's reads are bounded by the timeout
    table, used = _scan(db, "SELECT v.id, v.code FROM vals v", ["id"], arrow=True, timeout_s=1e-9)
    assert table.num_rows == ROWS and not any(used)


def _mixed(db, tmp_path, column: str, value) -> None:
    """A copy of `vals` with `value` stored in `column` of row 60 (SQLite keeps any storage class)."""
    path = tmp_path / "mixed.db"
    with sqlite3.connect(db) as source, sqlite3.connect(path) as target:
        source.backup(target)
        target.execute(f"UPDATE vals SET {column} = ? WHERE id = 60", (value,))
    return path


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("t", 7),  # an integer in a text column: its digits, as str() writes them
        ("t", 2.5),  # a real in a text column: sqlite3's path (the driver writes 2.500000e+00)
        ("t", b"caf\xc3\xa9"),  # a UTF-8 blob in a text column
        ("r", 3),  # an integer in a real column
        ("n", "12.5"),  # numeric text is stored as a number
        ("ok", "true"),
        ("code", 42),
        ("b", "text in a blob column"),
        ("at", "2024-03-01 12:00:00+02:00"),  # an offset: the converter's UTC
        ("at_tz", "2024-03-01T12:00:00.1234567"),  # more digits than Arrow's parser takes
    ],
)
def test_mixed_storage_classes_read_as_sqlite3_reads_them(db, tmp_path, column, value):
    path = _mixed(db, tmp_path, column, value)
    _same(path, f"SELECT v.id, v.{column} FROM vals v", ["id"])


@pytest.mark.parametrize("value", [2.5, -1e-300, 1e300, float("inf"), float("-inf")])
def test_a_real_among_texts_sends_its_chunk_to_sqlite3(tmp_path, value):
    # a column of no affinity keeps the real, which the driver writes as text of 3 to 14
    # bytes ('inf', '-1.000000e-300'), where Python's str() writes another
    path = tmp_path / "loose.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE l (id INTEGER PRIMARY KEY, v)")
        conn.executemany("INSERT INTO l VALUES (?, ?)", [(i, value if i == 30 else f"v{i}") for i in range(1, 60)])
    assert _same(path, "SELECT l.id, l.v FROM l l", ["id"]) == [False, False, True]


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("i", 2.5, "'i'"),
        ("i", "x", "'i'"),
        ("b", 5, "'b'"),
        ("t", b"\xff", "utf-8"),
        ("ok", 2, "'ok'"),
        ("day", "2024-1-5", "'day'"),
        ("at", "2024-02-30 10:00", "'at'"),
        ("at", 1700000000, "'at'"),
    ],
)
def test_a_value_the_converter_refuses_fails_as_before(db, tmp_path, column, value, message):
    path = _mixed(db, tmp_path, column, value)
    with pytest.raises((SourceDataError, sqlite3.OperationalError), match=message):
        _scan(path, f"SELECT v.id, v.{column} FROM vals v", ["id"], arrow=True)


def test_integer_text_keys_go_through_sqlite3(tmp_path):
    # an integer stored in a text key sorts before every text: its digits bound back would not
    path = tmp_path / "keys.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE k (c PRIMARY KEY, v INTEGER)")
        conn.executemany("INSERT INTO k VALUES (?, ?)", [(i if i % 3 else f"k{i:03d}", i) for i in range(40)])
    used = _same(path, "SELECT k.c, k.v FROM k k", ["c"], chunk_rows=7)
    assert used == [False] * 4 + [True] * 2  # 26 integers first, then the texts


def test_parameters_the_driver_binds_otherwise_go_through_sqlite3(db):
    conn = sqlite_adapter.sqlite_arrow.connect(str(db))
    try:
        read = sqlite_adapter.sqlite_arrow.read_table
        assert read(conn, "SELECT quote(?) AS q, quote(?) AS b", [7, b"\x01"]).to_pylist() == [{"q": "7", "b": "X'01'"}]
        assert read(conn, "SELECT ? AS at", [dt.datetime(2024, 3, 1, 12)]) is None  # 'T', where sqlite3 writes ' '
    finally:
        conn.close()


def test_the_adbc_connection_is_read_only(db):
    adapter = open_adapter(f"sqlite:///{db}", statement_timeout_s=5)
    assert adapter.arrow_reads  # on by default
    conn = sqlite_adapter.sqlite_arrow.connect(str(db))
    try:
        with conn.cursor() as cursor:
            with pytest.raises(Exception, match="readonly|read-only|query_only"):
                cursor.execute("CREATE TABLE evil (x)")
            cursor.execute("PRAGMA query_only")
            assert cursor.fetchall() == [(1,)]
    finally:
        conn.close()
    assert not open_adapter(f"sqlite:///{db}", statement_timeout_s=5, sqlite_arrow_reads=False).arrow_reads


#: Texts near the driver's forms of numbers: digits, dots, exponents, inf, of every length.
_NEAR_NUMBERS = st.lists(
    st.one_of(
        st.none(),
        st.text(alphabet="0123456789.e+-inf aZ", max_size=16),
        st.builds(
            lambda sign, mantissa, exponent: f"{sign}{mantissa:.6f}e{exponent:+03d}",
            st.sampled_from(["", "-"]),
            st.floats(1, 9.999999),
            st.integers(-400, 400),
        ),
        st.sampled_from(["inf", "-inf", "Olaf", "12 Main St.5"]),
        st.integers().map(str),
    ),
    max_size=40,
)


@given(values=_NEAR_NUMBERS, start=st.integers(0, 5), binary=st.booleans())
def test_the_prefilters_find_what_the_patterns_find(values, start, binary):
    # numpy narrows the values the regular expression is run on: never to fewer that match
    array = pa.array(
        [v.encode() if binary and v is not None else v for v in values], pa.binary() if binary else pa.string()
    )
    array = array.slice(min(start, len(values)))
    shown = [v for v in values[min(start, len(values)) :] if v is not None]
    assert sqlite_arrow._any_converted_real(array) == any(re.search(sqlite_arrow._CONVERTED_REAL, v) for v in shown)
    assert sqlite_arrow._any_digits(array) == any(re.search(sqlite_arrow._DIGITS, v) for v in shown)
