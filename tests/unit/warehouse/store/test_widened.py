"""A widened copy: the rows cast to the wider types, the current version untouched, derived state left out."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.store.layers import write_part
from warehouse.store.versions import Version
from warehouse.store.widened import widened_copy


def test_the_copy_is_cast_and_the_current_version_keeps_its_files(tmp_path):
    current = Version(3, "s3", tmp_path / "versions" / "3")
    amounts = pa.array([decimal.Decimal("12.34"), None, decimal.Decimal("-999999999999.99")], pa.decimal128(14, 2))
    rows = pa.table({"id": [1, 2, 3], "amount": amounts, "__tno": [1, 1, 1]})
    write_part(rows, current.fragment(0))
    (current.fragment(0) / ".part-0.zstd.parquet.crc").write_bytes(b"old checksum")
    write_part(pa.table({"before": [3], "deleted": [1]}), current.deletions(0))
    (current.site_dir(0) / "sketch").mkdir()
    (current.site_dir(0) / "sketch" / "sketch.arrow").write_bytes(b"hashes of the old encoding")
    write_part(rows.select(["id", "amount"]).slice(0, 1), current.path / "sample")
    (current.path / "meta.json").write_text("{}")

    wide = pa.decimal128(16, 4)
    copy = widened_copy(current, tmp_path / "staging" / "s4.widened", {0: {"amount": wide}}, {"amount": wide})

    assert (copy.number, copy.sync_id) == (3, "s3")
    widened = pq.read_table(copy.fragment(0))
    assert widened.schema.field("amount").type == wide
    assert widened.column("amount").to_pylist() == amounts.to_pylist()
    assert widened.column("id").to_pylist() == [1, 2, 3]
    assert pq.read_table(copy.path / "sample").schema.field("amount").type == wide
    assert pq.read_table(copy.deletions(0)).equals(pq.read_table(current.deletions(0)))
    assert not (copy.site_dir(0) / "sketch").exists()
    assert not (copy.fragment(0) / ".part-0.zstd.parquet.crc").exists()
    assert (copy.path / "meta.json").exists()
    # the current version is as it was: the rewritten file replaced its link, not its bytes
    assert pq.read_table(current.fragment(0)).equals(rows)
    assert (current.site_dir(0) / "sketch" / "sketch.arrow").exists()


def test_a_decimal_widened_to_text_keeps_each_value_as_its_exact_text(tmp_path):
    current = Version(1, "s1", tmp_path / "versions" / "1")
    amounts = pa.array(
        [decimal.Decimal("12345678901234567890.1234567890"), decimal.Decimal("1.5"), None], pa.decimal128(38, 10)
    )
    write_part(pa.table({"id": [1, 2, 3], "amount": amounts}), current.fragment(0))
    copy = widened_copy(current, tmp_path / "staging" / "s2.widened", {0: {"amount": pa.string()}}, {})
    texts = pq.read_table(copy.fragment(0)).column("amount").to_pylist()
    assert texts == ["12345678901234567890.1234567890", "1.5000000000", None]
