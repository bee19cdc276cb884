"""deltasieve in orchestrators, on the client (deltasieve.client): an Airflow operator
(deltasieve.orchestration.airflow, the `airflow` extra) and a Dagster asset factory
(deltasieve.orchestration.dagster, the `dagster` extra). Each imports its orchestrator; this
module imports neither, and holds what both report of a sync."""

from __future__ import annotations

from typing import Any

from deltasieve.records import Sync

#: The metrics of a sync an orchestrator shows beside its task or asset (the rest stay in
#: the sync's record, GET /v1/views/{name}/syncs/{id}).
SUMMARY_METRICS = (
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "rows_in_view",
    "bytes_to_agent",
    "bytes_from_agent",
    "wall_seconds",
    "strategy",
)


def sync_summary(sync: Sync) -> dict[str, Any]:
    """What a finished sync did, flat and JSON-safe: its id (the view's version it committed),
    status, the metrics of SUMMARY_METRICS it has, and when it ran.

    >>> s = Sync.from_json({"id": "s9", "view": "v", "status": "succeeded", "finished_at": "t1",
    ...                     "metrics": {"rows_inserted": 3, "rows_updated": 0, "phases": {"scan": 1.0}}})
    >>> sync_summary(s)
    {'sync_id': 's9', 'view': 'v', 'status': 'succeeded', 'rows_inserted': 3, 'rows_updated': 0, 'started_at': None, 'finished_at': 't1'}
    """
    summary: dict[str, Any] = {"sync_id": sync.id, "view": sync.view, "status": sync.status}
    summary.update({name: sync.metrics[name] for name in SUMMARY_METRICS if sync.metrics.get(name) is not None})
    summary.update(started_at=sync.started_at, finished_at=sync.finished_at)
    return summary
