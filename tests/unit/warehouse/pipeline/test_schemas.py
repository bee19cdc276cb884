"""Fetching the sources' schemas: a failing agent is named in the error."""

from __future__ import annotations

import pytest

from warehouse.errors import SchemaUnavailable
from warehouse.pipeline.source_schemas import fetch_schemas
from workloads.harness import free_port


def test_unreachable_agent_names_its_source_and_is_transient():
    with pytest.raises(SchemaUnavailable) as info:
        fetch_schemas([("crm", f"http://127.0.0.1:{free_port()}", None)], read_timeout_s=5, deadline_s=5)
    assert info.value.source == "crm" and info.value.transient
    assert info.value.message.startswith("cannot read the schema of source 'crm': ")


def test_sources_are_taken_one_at_a_time():
    def agents():
        yield "crm", f"http://127.0.0.1:{free_port()}", None
        raise AssertionError("the next source is looked up after the first agent failed")

    with pytest.raises(SchemaUnavailable):
        fetch_schemas(agents(), read_timeout_s=5, deadline_s=5)
