"""deltasieve_assets in Dagster (.venv-dagster, `make test-orchestrators`): assets materialized
in process against the real service, each materialization's metadata the sync's metrics and its
data version the sync's id; a failed sync fails the run with the service's reason."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterEventType, materialize

from deltasieve.orchestration.dagster import deltasieve_assets
from tests.orchestrators.conftest import API_KEY, GONE, VIEW

pytestmark = pytest.mark.integration


def _materialization(result, key: AssetKey):
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == key]
    return event.materialization


def test_each_view_is_an_asset_and_its_sync_the_materialization(deltasieve):
    assets = deltasieve_assets(deltasieve.url, api_key=API_KEY, key_prefix="warehouse")  # every view
    assert sorted(a.key.path[-1] for a in assets) == sorted([VIEW, GONE])
    (people,) = [a for a in assets if a.key == AssetKey(["warehouse", VIEW])]

    first = materialize([people])
    assert first.success
    loaded = _materialization(first, people.key)
    assert (
        loaded.metadata["rows_inserted"].value == len(deltasieve.people.truth())
        and loaded.metadata["status"].value == "succeeded"
    )

    deltasieve.people.change(updates=12, inserts=4, deletes=3)
    second = materialize([people])
    synced = _materialization(second, people.key)
    record = deltasieve.client.sync_record(VIEW, synced.metadata["sync_id"].value)
    assert record.succeeded and record.id != loaded.metadata["sync_id"].value
    for name in ("rows_inserted", "rows_updated", "rows_deleted", "rows_in_view", "wall_seconds", "bytes_from_agent"):
        assert synced.metadata[name].value == record.metrics[name], name
    assert record.metrics["rows_in_view"] == len(deltasieve.people.truth())
    assert synced.tags["dagster/data_version"] == record.id


def test_a_failed_sync_fails_the_run_with_the_services_reason(deltasieve):
    (gone,) = deltasieve_assets(deltasieve.url, [GONE], api_key=API_KEY, poll_s=0.2)
    result = materialize([gone], raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    (last, *_) = deltasieve.client.syncs(GONE)
    assert last.status == "failed" and last.error_code == "agent_unreachable"
    user = failure.step_failure_data.user_failure_data
    assert f"sync {last.id} of view {GONE} failed [agent_unreachable]: " in user.description
    assert user.metadata["sync_id"].value == last.id
    assert result.get_asset_materialization_events() == []
