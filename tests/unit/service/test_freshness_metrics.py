"""Every view has its freshness series, a never-succeeded one at 0; sources have an up gauge (service/metrics.py)."""

from __future__ import annotations

from service.catalog import Catalog, now
from service.metrics import ServiceMetrics
from service.readers import Readers
from service.source_health import SourceHealth
from warehouse.errors import AgentRejected
from warehouse.view_options import ViewOptions


def _lines(metrics: ServiceMetrics) -> set[str]:
    return set(metrics.exposition().decode().splitlines())


def test_a_view_that_never_succeeded_has_its_series_at_zero(tmp_path):
    catalog = Catalog(tmp_path / "catalog.db")
    catalog.add_view("synced", "SELECT 1", {"sites": []}, ViewOptions.from_stored({"strategy": "auto"}))
    sync = catalog.queue_sync("synced")
    catalog.update_sync(
        sync.id, status="succeeded", started_at="2026-01-01T00:00:00+00:00", finished_at="2026-01-01T00:01:00+00:00"
    )
    catalog.add_view("failing", "SELECT 1", {"sites": []}, ViewOptions.from_stored({"strategy": "auto"}))
    catalog.update_sync(catalog.queue_sync("failing").id, status="failed", finished_at=now())
    metrics = ServiceMetrics()
    metrics.seed(catalog)
    catalog.add_view("later", "SELECT 1", {"sites": []}, ViewOptions.from_stored({"strategy": "auto"}))
    metrics.catalogued(catalog.view_names())  # what a scrape does: views made since the start too
    lines = _lines(metrics)
    for view in ("failing", "later"):
        assert f'deltasieve_last_success_timestamp_seconds{{view="{view}"}} 0.0' in lines
        assert f'deltasieve_data_as_of_timestamp_seconds{{view="{view}"}} 0.0' in lines
    assert 'deltasieve_last_success_timestamp_seconds{view="synced"} 1.76722566e+09' in lines
    assert 'deltasieve_data_as_of_timestamp_seconds{view="synced"} 1.7672256e+09' in lines
    catalog.close()


def test_a_source_is_up_while_its_agent_answers(tmp_path):
    metrics = ServiceMetrics()
    health = SourceHealth(on_change=lambda source, h: metrics.source(source, h.status == "ok"))
    first = health.report("erp", AgentRejected("agent answered 401: wrong token", 401))
    assert first.status == "refused" and first.since == first.checked_at
    again = health.report("erp", AgentRejected("agent answered 401: wrong token", 401))
    assert again.since == first.since  # refused since the first refusal
    assert 'deltasieve_source_up{source="erp"} 0.0' in _lines(metrics)
    assert health.report("erp", None).status == "ok"
    assert 'deltasieve_source_up{source="erp"} 1.0' in _lines(metrics)


def test_a_streamed_answer_releases_its_reader_when_done_or_dropped():
    readers = Readers()
    readers.hold("v")
    assert list(readers.streamed("v", iter([b"a", b"b"]))) == [b"a", b"b"]
    with readers.excluding("v") as alone:
        assert alone
    readers.hold("v")
    body = readers.streamed("v", iter([b"a", b"b"]))
    next(body)
    with readers.excluding("v") as alone:
        assert not alone  # mid-stream: retention waits
    body.close()  # the client went away
    with readers.excluding("v") as alone:
        assert alone


def test_each_apply_to_a_destination_is_timed_until_its_view_goes():
    metrics = ServiceMetrics()
    for seconds in (1.5, 0.5):
        metrics.published("v", "delta /d/tables/v", seconds)
    lines = _lines(metrics)
    assert 'deltasieve_publish_seconds_sum{destination="delta /d/tables/v",view="v"} 2.0' in lines
    assert 'deltasieve_publish_seconds_count{destination="delta /d/tables/v",view="v"} 2.0' in lines
    metrics.forget("v")
    assert not any(line.startswith("deltasieve_publish_seconds") and 'view="v"' in line for line in _lines(metrics))
