"""The stored form of a view definition: one format number per kind of view, any other refused."""

from __future__ import annotations

import pytest

from deltasieve_protocol.types import Column, LogicalType
from warehouse.errors import FormatError, StorageError
from warehouse.formats import DEFINITION_FORMAT, JOINED_MULTISET_DEFINITION_FORMAT, MULTISET_DEFINITION_FORMAT
from warehouse.viewdef import SiteQuery, ViewDef

COLUMNS = [Column("id", LogicalType.parse("int")), Column("name", LogicalType.parse("text"))]
VIEW = ViewDef(
    "SELECT p.id, p.name FROM crm.people p",
    COLUMNS,
    ["id"],
    [SiteQuery("crm", 'SELECT "p"."id" AS "id", "p"."name" AS "name" FROM "people" AS "p"', COLUMNS, ["id"])],
)
#: A single-site definition as stored, without its "format" field.
UNNUMBERED = {
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


def test_definitions_are_written_in_the_current_format_and_read_back():
    assert DEFINITION_FORMAT == 2
    assert VIEW.to_json() == {"format": 2, **UNNUMBERED}
    assert ViewDef.from_json(VIEW.to_json()) == VIEW


def test_a_definition_without_a_format_is_refused_saying_what_to_do():
    with pytest.raises(FormatError) as info:
        ViewDef.of_view("people", UNNUMBERED)
    assert isinstance(info.value, StorageError) and info.value.code == "stored_format"
    assert "view 'people'" in info.value.message and "without a format number" in info.value.message
    assert "create it again" in info.value.message
    assert (info.value.found, info.value.expected) == (None, DEFINITION_FORMAT)


@pytest.mark.parametrize("number", [5, 99])
def test_a_newer_definition_is_refused_with_a_hint_to_upgrade(number):
    with pytest.raises(FormatError) as info:
        ViewDef.from_json({**UNNUMBERED, "format": number})
    assert isinstance(info.value, StorageError)
    assert f"format {number}" in info.value.message and "upgrade deltasieve" in info.value.message


@pytest.mark.parametrize(
    "number", [0, 1, "2", None, 1.5, MULTISET_DEFINITION_FORMAT, JOINED_MULTISET_DEFINITION_FORMAT]
)
def test_a_keyed_definition_in_any_other_format_is_refused(number):
    with pytest.raises(FormatError, match="create it again|upgrade deltasieve"):
        ViewDef.from_json({**UNNUMBERED, "format": number})
