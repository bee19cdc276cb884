"""Typed sync metrics serialize to the JSON the contract names, and sum sites correctly."""

from tests.support.oracle import CONTRACT_METRICS
from warehouse.metrics import Attempt, SiteMetrics, SyncMetrics


def _site(source: str, **counts) -> SiteMetrics:
    return SiteMetrics(source=source, **counts)


def test_a_succeeded_sync_carries_every_contract_field():
    m = SyncMetrics(strategy="group_hash", hash_bits=128)
    m.add_sites([_site("a", groups_sent=3, rows_before=10, bytes_to_agent=5)])
    m.rows_inserted, m.rows_updated, m.rows_deleted, m.rows_in_view = 1, 2, 3, 4
    m.wall_seconds = 1.5
    out = m.to_json()
    assert set(CONTRACT_METRICS) <= set(out)
    assert out["groups_sent"] == 3 and out["rows_before"] == 10
    assert out["sites"] == [_site("a", groups_sent=3, rows_before=10, bytes_to_agent=5).to_json()]


def test_sites_are_summed_and_details_lifted_only_for_one_site():
    one = _site("a", rows_scanned=7, range_rounds=3)
    two = _site("b", rows_scanned=5, range_rounds=2)
    m = SyncMetrics()
    m.add_sites([one, two])
    assert m.rows_scanned == 12 and m.range_rounds is None
    m = SyncMetrics()
    m.add_sites([one])
    assert m.range_rounds == 3 and m.to_json()["range_rounds"] == 3


def test_what_was_not_measured_is_left_out():
    failed = SyncMetrics(strategy="tuple_hash", hash_bits=128, wall_seconds=0.2)
    failed.attempts.append(Attempt(site=0, source="a", attempt=1, error="down", seconds=0.1, bytes_to_agent=9))
    out = failed.to_json()
    assert "rows_inserted" not in out and "mode" not in out and "sites" not in out
    assert out["attempts"] == [
        {
            "site": 0,
            "source": "a",
            "attempt": 1,
            "error": "down",
            "seconds": 0.1,
            "bytes_to_agent": 9,
            "bytes_from_agent": 0,
            "round_trips": 0,
        }
    ]
    assert SyncMetrics(mode="verify").to_json()["mode"] == "verify"
