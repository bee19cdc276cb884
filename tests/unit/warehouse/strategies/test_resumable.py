"""Which full reads resume, and the control frame of a resumed extract (strategies/resumable.py)."""

from __future__ import annotations

from deltasieve_protocol.grouped import COUNT_COLUMN
from deltasieve_protocol.models import ExtractControl, SiteSpec
from deltasieve_protocol.types import Column, LogicalType
from warehouse.strategies.base import _control_fields
from warehouse.strategies.resumable import resumable
from warehouse.viewdef import SiteQuery

COLUMNS = [
    Column("region", LogicalType("text")),
    Column("code", LogicalType("int")),
    Column("day", LogicalType("date")),
]


def test_keys_of_integers_and_text_resume_others_do_not():
    assert resumable(SiteQuery("s", "SELECT ...", COLUMNS, ["region", "code"]))
    assert not resumable(SiteQuery("s", "SELECT ...", COLUMNS, ["code", "day"]))
    # read as a stronger type than the source declares: not the value the database orders by
    assert not resumable(SiteQuery("s", "SELECT ...", COLUMNS, ["code"], read_from={"code": "text"}))


def test_a_multisets_grouped_site_query_does_not_resume():
    grouped = SiteQuery("s", "SELECT ...", [*COLUMNS[:2], Column(COUNT_COLUMN, LogicalType("int"))], ["region", "code"])
    assert grouped.grouped and not resumable(grouped)


def test_the_field_is_left_out_of_the_control_frame_when_unused():
    """As an agent older than it is sent (which would ignore it: the answer's header tells)."""
    spec = SiteSpec(sql="SELECT t.id FROM t", key=["id"], columns=[{"name": "id", "type": "int"}])
    assert "resume_after" not in _control_fields(ExtractControl(site=spec, seed=1))
    assert _control_fields(ExtractControl(site=spec, seed=1, resume_after=[4, "a"]))["resume_after"] == [4, "a"]
