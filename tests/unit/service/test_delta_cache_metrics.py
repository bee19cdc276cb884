"""/metrics shows the rows of Delta files held in memory and where rewritten files came from
(service/metrics.py over warehouse/destinations/delta_file_cache.py's process-wide cache)."""

from __future__ import annotations

import re

import pyarrow as pa

from service.metrics import ServiceMetrics
from warehouse.destinations.delta_file_cache import CACHE


def _values(metrics: ServiceMetrics) -> dict[str, float]:
    text = metrics.exposition().decode()
    pattern = r'^(deltasieve_delta_cache_(?:bytes|files_total(?:\{source="\w+"\})?)) (\S+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


def test_the_cache_is_measured_at_each_scrape():
    metrics = ServiceMetrics()
    before = _values(metrics)
    rows = pa.table({"k": pa.array(range(1000), pa.int64())})
    CACHE.put("/metrics-test/a.parquet", rows, [])
    held = _values(metrics)
    assert held["deltasieve_delta_cache_bytes"] == before["deltasieve_delta_cache_bytes"] + rows.nbytes
    assert CACHE.take("/metrics-test/a.parquet") is not None and CACHE.take("/metrics-test/b.parquet") is None
    after = _values(metrics)
    assert after["deltasieve_delta_cache_bytes"] == before["deltasieve_delta_cache_bytes"]
    for source in ("kept", "read"):
        name = f'deltasieve_delta_cache_files_total{{source="{source}"}}'
        assert after[name] == before[name] + 1, (before, after)
