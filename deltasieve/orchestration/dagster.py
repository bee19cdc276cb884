"""Dagster assets that are deltasieve views (the `dagster` extra).

    from dagster import Definitions
    from deltasieve.orchestration.dagster import deltasieve_assets

    defs = Definitions(assets=deltasieve_assets("http://deltasieve:8000", ["orders", "customers"],
                                                api_key=EnvVar("DELTASIEVE_API_KEY").get_value()))

One asset per view: materializing it runs a sync of the view through the client
(deltasieve.client) and waits for its end. The materialization's metadata is the sync's
summary (deltasieve.orchestration.sync_summary: rows inserted, updated and deleted, rows in
the view, bytes each way, wall time, strategy) and its data version is the sync's id, the
view's version that sync committed. A failed sync raises a Dagster Failure with the service's
reason and the sync's id and error code as metadata, and so does a call the service refused or
did not answer; Dagster's retries are allowed only where a later try may pass (the error's
`transient`: for a failed sync, its error code).
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import (
    AssetsDefinition,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from deltasieve.client import POLL_S, Client
from deltasieve.errors import DeltasieveError, SyncFailed
from deltasieve.orchestration import sync_summary


def deltasieve_assets(
    service_url: str,
    views: Sequence[str] | None = None,
    *,
    api_key: str | None = None,
    key_prefix: str | Sequence[str] | None = None,
    group_name: str | None = "deltasieve",
    verify: bool = False,
    timeout_s: float | None = None,
    poll_s: float = POLL_S,
) -> list[AssetsDefinition]:
    """One asset per view of the service at `service_url` (every view its key may see when
    `views` is None, listed now, when the definitions load).

    Args:
        key_prefix: put before each view's name in its asset key.
        verify: each sync also compares every row with the source (the service's verify mode).
        timeout_s: fail a materialization whose sync has not ended after this many seconds.
    """
    if views is None:
        with Client(service_url, api_key) as client:
            views = [view.name for view in client.views()]
    return [
        _view_asset(service_url, view, api_key, key_prefix, group_name, verify, timeout_s, poll_s) for view in views
    ]


def _view_asset(
    service_url: str,
    view: str,
    api_key: str | None,
    key_prefix: str | Sequence[str] | None,
    group_name: str | None,
    verify: bool,
    timeout_s: float | None,
    poll_s: float,
) -> AssetsDefinition:
    @asset(
        name=view,
        key_prefix=key_prefix,
        group_name=group_name,
        kinds={"deltasieve"},
        description=f"The deltasieve view {view} at {service_url}, brought up to date by a sync.",
    )
    def sync_view(context) -> MaterializeResult:  # not annotated: Dagster checks the annotation, a string here
        with Client(service_url, api_key) as client:
            try:
                sync = client.sync(view, verify=verify, timeout_s=timeout_s, poll_s=poll_s)
            except SyncFailed as failed:
                raise Failure(
                    description=str(failed),
                    metadata={"sync_id": failed.sync.id, "error_code": failed.sync.error_code or ""},
                    allow_retries=failed.transient,
                ) from None
            except DeltasieveError as error:  # refused (a 4xx names what to change), or no answer
                raise Failure(description=str(error), allow_retries=error.transient) from None
        context.log.info(f"sync {sync.id} of view {view}: {sync.metrics.get('rows_in_view')} rows")
        metadata = {name: value for name, value in sync_summary(sync).items() if value is not None}
        metadata["sync_record"] = MetadataValue.url(f"{client.url}/v1/views/{view}/syncs/{sync.id}")
        return MaterializeResult(metadata=metadata, data_version=DataVersion(sync.id))

    return sync_view
