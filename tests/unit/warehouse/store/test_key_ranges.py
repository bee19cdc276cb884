"""key_ranges: a lookup of a few keys decodes only the row groups that hold them.

Every row group that holds no wanted key is made unreadable (its column chunks overwritten),
so a lookup that decoded one would fail: the test sees which row groups were read, not how
long it took. Fragments are written as the syncs write them (Arrow on the driver, Spark
otherwise), with composite keys, text keys and NULL in the key (NULL matching NULL)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from deltasieve_protocol.types import Column, LogicalType
from warehouse.names import TNO, UNO
from warehouse.spark import build_session
from warehouse.store import key_ranges, layers
from warehouse.store.versions import Version, ViewStore

COLUMNS = [
    Column("region", LogicalType("int")),
    Column("code", LogicalType("text")),
    Column("note", LogicalType("text")),
]
KEY = ["region", "code"]
SCHEMA = pa.schema(
    [pa.field("region", pa.int64()), pa.field("code", pa.string()), pa.field("note", pa.string())]
    + [pa.field(TNO, pa.int64()), pa.field(UNO, pa.int64())]
)
ROW_GROUP_ROWS = 10


def stored_rows() -> pa.Table:
    """Regions 0-19 of 7 codes each (c3 NULL in odd regions), and 7 rows of NULL region: in no order."""
    rows = [
        {
            "region": r,
            "code": None if c == 3 and (r or 0) % 2 else f"c{c}",
            "note": f"{r}/{c}",
            TNO: 1 + (r or 0),
            UNO: 1,
        }
        for r in [*range(19, -1, -1), None]
        for c in range(7)
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def wanted_rows(rows: pa.Table, keys: list[tuple]) -> list[dict]:
    """The rows of `keys`, NULL matching NULL, found without Arrow's joins."""
    asked = set(keys)
    return sorted((r for r in rows.to_pylist() if (r["region"], r["code"]) in asked), key=str)


def spoil_unwanted(directory: Path, first_values: set) -> int:
    """Overwrite the column chunks of every row group holding none of `first_values` in its
    first key column; the row groups spoiled."""
    spoiled = 0
    for path in sorted(directory.glob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        held = [
            set(pq.ParquetFile(path).read_row_group(g, columns=["region"]).column(0).to_pylist())
            for g in range(meta.num_row_groups)
        ]
        with open(path, "r+b") as f:
            for g, values in enumerate(held):
                if values & first_values:
                    continue
                for c in range(meta.num_columns):
                    chunk = meta.row_group(g).column(c)
                    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                    f.seek(start)
                    f.write(b"\xff" * chunk.total_compressed_size)
                spoiled += 1
    return spoiled


def committed(tmp_path: Path, write) -> Version:
    store = ViewStore(tmp_path / "store", "v")
    store.staging("s1")
    staged = store.staged_version("s1", 1)
    staged.site_dir(0).mkdir(parents=True)
    write(staged.fragment(0))
    layers.whole(stored_rows().num_rows).save(staged.site_dir(0))
    return store.commit(staged, {})


KEYS = [(4, "c1"), (4, None), (5, None), (12, "c6"), (None, "c2"), (30, "c0")]  # (4, None) and (30, c0) are not stored


def check_lookup(version: Version) -> None:
    fragment = version.fragment(0)
    assert sum(pq.ParquetFile(p).num_row_groups for p in fragment.glob("*.parquet")) > 6
    spoiled = spoil_unwanted(fragment, {k[0] for k in KEYS})
    assert spoiled >= 6
    with pytest.raises(OSError):  # the spoiled row groups cannot be read: a whole read fails
        ds.dataset(fragment, format="parquet").to_table()
    keys = pa.table(
        {"region": [k[0] for k in KEYS], "code": [k[1] for k in KEYS]}, schema=pa.schema([SCHEMA.field(k) for k in KEY])
    )
    got = layers.lookup(version, 0, COLUMNS, KEY, keys)
    assert got.schema == SCHEMA
    assert sorted(got.to_pylist(), key=str) == wanted_rows(stored_rows(), KEYS)
    assert {(r["region"], r["code"]) for r in got.to_pylist()} == {(4, "c1"), (5, None), (12, "c6"), (None, "c2")}


def test_a_lookup_on_a_fragment_written_by_arrow_decodes_only_the_row_groups_of_its_keys(tmp_path):
    def write(fragment: Path) -> None:
        fragment.mkdir(parents=True)
        key_ranges.write_table(stored_rows(), fragment / "part-0.parquet", KEY, ROW_GROUP_ROWS)

    check_lookup(committed(tmp_path, write))


def test_a_lookup_on_a_fragment_written_by_spark_decodes_only_the_row_groups_of_its_keys(tmp_path):
    spark = build_session("local[2]")
    frame = spark.createDataFrame(stored_rows().to_pandas(), layers.stored_ddl(COLUMNS)).repartition(2)

    def write(fragment: Path) -> None:
        key_ranges.write_frame(frame, KEY, fragment, ROW_GROUP_ROWS)

    version = committed(tmp_path, write)
    for path in version.fragment(0).glob("*.parquet"):  # each file sorted by the key, in small row groups
        meta = pq.ParquetFile(path).metadata
        assert max(meta.row_group(g).num_rows for g in range(meta.num_row_groups)) <= ROW_GROUP_ROWS
        regions = [r for r in pq.read_table(path, columns=["region"]).column(0).to_pylist() if r is not None]
        assert regions == sorted(regions)
    check_lookup(version)


def test_keys_of_a_type_without_a_range_are_read_from_every_row_group(tmp_path):
    """Floats (NaN has no place in a range) are looked up in every row group, and found."""
    rows = pa.table({"x": [float(i) for i in range(30)] + [float("nan"), None], "v": list(range(32))})
    key_ranges.write_table(rows, tmp_path / "part-0.parquet", ["x"], ROW_GROUP_ROWS)
    dataset = ds.dataset(tmp_path, format="parquet")
    keys = pa.table({"x": [3.0, 25.0, None]})
    assert [groups for _, groups in key_ranges.row_groups(dataset, ["x"], keys)] == [[0, 1, 2, 3]]
    got = key_ranges.read(tmp_path, rows.schema, ["x"], keys)
    assert sorted(got.column("v").to_pylist()) == [3, 25, 31]
