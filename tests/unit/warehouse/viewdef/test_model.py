"""The stored form of a view definition: its format number, older forms read, newer refused."""

from __future__ import annotations

import pytest

from protocol.types import Column, LogicalType
from warehouse.errors import FormatError, StorageError
from warehouse.formats import DEFINITION_FORMAT
from warehouse.viewdef import SiteQuery, ViewDef, upgrade_definition

COLUMNS = [Column("id", LogicalType.parse("int")), Column("name", LogicalType.parse("text"))]
VIEW = ViewDef(
    "SELECT p.id, p.name FROM crm.people p",
    COLUMNS,
    ["id"],
    [SiteQuery("crm", 'SELECT "p"."id" AS "id", "p"."name" AS "name" FROM "people" AS "p"', COLUMNS, ["id"])],
)
#: A single-site definition as deltasieve 41bc7ec stored it (format 1: no "format" field).
FORMAT_1 = {
    "sql": VIEW.sql,
    "columns": [{"name": "id", "type": "int"}, {"name": "name", "type": "text"}],
    "key": ["id"],
    "sites": [
        {
            "source": "crm",
            "sql": VIEW.sites[0].sql,
            "columns": [{"name": "id", "type": "int"}, {"name": "name", "type": "text"}],
            "key": ["id"],
        }
    ],
}


def test_definitions_are_written_in_the_current_format():
    assert DEFINITION_FORMAT == 2
    assert VIEW.to_json() == {"format": 2, **FORMAT_1}


def test_a_definition_without_format_is_format_1_and_reads_the_same():
    assert ViewDef.from_json(FORMAT_1) == VIEW
    assert ViewDef.from_json({"format": 1, **FORMAT_1}) == VIEW


@pytest.mark.parametrize("number", [5, 99])
def test_a_newer_definition_is_refused_with_a_hint_to_upgrade(number):
    with pytest.raises(FormatError) as info:
        ViewDef.from_json({**FORMAT_1, "format": number})
    assert isinstance(info.value, StorageError)
    assert f"format {number}" in info.value.message and "upgrade deltasieve" in info.value.message


@pytest.mark.parametrize("number", [0, "2", None, 1.5])
def test_a_format_that_is_no_format_number_is_refused(number):
    with pytest.raises(FormatError, match="not a format number"):
        ViewDef.from_json({**FORMAT_1, "format": number})


def test_upgrade_rewrites_older_definitions_only():
    assert upgrade_definition(FORMAT_1) == VIEW.to_json()
    assert upgrade_definition(VIEW.to_json()) is None
    assert upgrade_definition({**FORMAT_1, "format": 5}) is None  # left for its readers to refuse
    assert upgrade_definition({**FORMAT_1, "format": 4}) is None  # a multiset view over several sites
    assert upgrade_definition({**FORMAT_1, "format": 3}) is None  # a multiset view's format
