"""Which definition the catalog adopts from a committed version, and which schema changes a sync meets."""

from __future__ import annotations

import json

from deltasieve_protocol.types import Column, LogicalType
from warehouse.errors import AgentRejected, AgentUnavailable
from warehouse.formats import STORAGE_FORMAT
from warehouse.pipeline.failures import drifted
from warehouse.pipeline.schema_policy import adopted_definition
from warehouse.store.versions import Version
from warehouse.viewdef import SiteQuery, ViewDef


def _definition(amount: str) -> dict:
    columns = [Column("id", LogicalType("int")), Column("amount", LogicalType.parse(amount))]
    return ViewDef("SELECT ...", columns, ["id"], [SiteQuery("pg", "SELECT ...", columns, ["id"])]).to_json()


def _version(tmp_path, **meta) -> Version:
    version = Version(4, "s4", tmp_path / "4")
    version.path.mkdir()
    (version.path / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "version": 4, **meta}))
    return version


def test_the_definition_a_widening_sync_committed_is_adopted_once_and_only_over_the_one_it_replaced(tmp_path):
    old, new, other = _definition("decimal(14,2)"), _definition("decimal(16,4)"), _definition("text")
    widened = _version(tmp_path, definition=new, definition_before=old)
    assert adopted_definition(widened, old) == new
    assert adopted_definition(widened, new) is None  # adopted already
    assert adopted_definition(widened, other) is None  # redefined since: its own definition stands
    assert adopted_definition(None, old) is None
    (widened.path / "meta.json").write_text(json.dumps({"format": STORAGE_FORMAT, "version": 4}))
    assert adopted_definition(widened, old) is None  # an ordinary sync's version


def test_a_schema_change_is_told_by_the_agents_code_never_by_its_words():
    assert drifted(AgentRejected("...", 409, "schema_changed", []))
    assert drifted(AgentRejected("not exposed", 403, "forbidden"))
    assert drifted(AgentRejected("no column 'x'", 422, "unsupported_query"))
    words = "agent answered 409: the source schema of table 't' changed since the view was registered: ..."
    assert not drifted(AgentRejected(words, 409, "source_data"))
    assert not drifted(AgentRejected("AGENT_HASH_KEY is not set", 422, "hash_key_missing"))
    assert not drifted(AgentUnavailable("timed out"))
