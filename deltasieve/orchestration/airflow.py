"""An Airflow operator that syncs a deltasieve view (the `airflow` extra: Airflow 3).

    from deltasieve.orchestration.airflow import DeltasieveSyncOperator

    DeltasieveSyncOperator(task_id="sync_orders", view="orders", deltasieve_conn_id="deltasieve")

The operator starts a sync through the client (deltasieve.client) and, deferrable (the
default), hands the wait to DeltasieveSyncTrigger, which reads the sync's record from the
triggerer with an asynchronous client until the sync ends; the task resumes on a worker in
execute_complete. `deferrable=False` waits in the worker instead. The task's return value
(XCom `return_value`) is the sync's summary (deltasieve.orchestration.sync_summary); its id is
also pushed as `sync_id` as soon as the sync is queued. A failed sync fails the task with the
service's reason: an AirflowFailException (no retries) unless its error code says a later
sync may pass (agent_unreachable, engine_lost, interrupted), then an AirflowException that the
task's retries apply to.

The service is found through an Airflow connection (`deltasieve_conn_id`, default
`deltasieve_default`): its host, with a scheme or `schema` and `port`, and its password the API
key; or through `url` and `api_key` given to the operator, which win.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

try:  # the task SDK's own, where it has them (Airflow 3.1 on); the core's are deprecated there
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:
    from airflow.exceptions import AirflowException, AirflowFailException
    from airflow.hooks.base import BaseHook

from deltasieve.client import CONNECT_TIMEOUT_S, POLL_S, Client, describe_detail
from deltasieve.errors import SyncFailed
from deltasieve.orchestration import sync_summary
from deltasieve.records import Sync

DEFAULT_CONN_ID = "deltasieve_default"
#: Seconds the trigger goes on asking a service that does not answer (a restart) before it gives up.
UNREACHABLE_FOR_S = 120.0
#: Seconds to wait for one answer from the service while polling (a sync's record is small).
POLL_READ_TIMEOUT_S = 30.0


def service_url(host: str, schema: str | None = None, port: int | None = None) -> str:
    """The service's URL from an Airflow connection's fields: a host may carry its scheme.

    >>> service_url("http://deltasieve:8000/")
    'http://deltasieve:8000'
    >>> service_url("deltasieve", "https", 8443), service_url("deltasieve", None, 8000)
    ('https://deltasieve:8443', 'http://deltasieve:8000')
    """
    if "://" in host:
        return host.rstrip("/")
    scheme = schema if schema in ("http", "https") else "http"
    return f"{scheme}://{host}" + (f":{port}" if port else "")


def failure(sync: Sync) -> AirflowException:
    """The exception that fails the task of a failed sync: retried only if a later sync may pass."""
    failed = SyncFailed(sync)
    return AirflowException(str(failed)) if failed.transient else AirflowFailException(str(failed))


class DeltasieveSyncTrigger(BaseTrigger):
    """Reads a sync's record every `poll_s` seconds until the sync ends, then fires one event:
    {"status": "finished", "sync": its record} or {"status": "error", "message": why the record
    could not be read (the service's answer, or no answer for UNREACHABLE_FOR_S)}."""

    def __init__(self, url: str, view: str, sync_id: str, api_key: str | None = None, poll_s: float = POLL_S):
        super().__init__()
        self.url, self.view, self.sync_id, self.api_key, self.poll_s = url, view, sync_id, api_key, poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs = {"url": self.url, "view": self.view, "sync_id": self.sync_id, "api_key": self.api_key}
        return f"{type(self).__module__}.{type(self).__qualname__}", {**kwargs, "poll_s": self.poll_s}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        headers = {"X-API-Key": self.api_key} if self.api_key else {}
        timeout = httpx.Timeout(POLL_READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        path = f"/v1/views/{self.view}/syncs/{self.sync_id}"
        answered = time.monotonic()
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout) as http:
            while True:
                try:
                    response = await http.get(path)
                except httpx.TransportError as exc:
                    if time.monotonic() - answered > UNREACHABLE_FOR_S:
                        yield TriggerEvent({"status": "error", "message": f"no answer from {self.url}: {exc!r}"})
                        return
                else:
                    answered = time.monotonic()
                    if response.status_code >= 400:
                        detail = describe_detail(response.json()) if response.content else response.reason_phrase
                        message = f"GET {path} → {response.status_code}: {detail}"
                        yield TriggerEvent({"status": "error", "message": message})
                        return
                    record = response.json()
                    if Sync.from_json(record).finished:
                        yield TriggerEvent({"status": "finished", "sync": record})
                        return
                await asyncio.sleep(self.poll_s)


class DeltasieveSyncOperator(BaseOperator):
    """Sync one view of a deltasieve service and wait for the sync's end (see the module's text).

    Args:
        view: the view's name (templated).
        deltasieve_conn_id: the Airflow connection of the service, unless `url` is given.
        url, api_key: the service's URL and API key, instead of (or over) the connection's.
        verify: also compare every row with the source (the service's verify mode).
        deferrable: wait in the triggerer (True) or in the worker.
        poll_s: seconds between two reads of the sync's record.
        timeout_s: fail the task if the sync has not ended after this many seconds (it goes on).
    """

    template_fields = ("view",)
    ui_color = "#d9ecf2"

    def __init__(
        self,
        *,
        view: str,
        deltasieve_conn_id: str = DEFAULT_CONN_ID,
        url: str | None = None,
        api_key: str | None = None,
        verify: bool = False,
        deferrable: bool = True,
        poll_s: float = POLL_S,
        timeout_s: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.view, self.deltasieve_conn_id, self.url, self.api_key = view, deltasieve_conn_id, url, api_key
        self.verify, self.deferrable, self.poll_s, self.timeout_s = verify, deferrable, poll_s, timeout_s

    def service(self) -> tuple[str, str | None]:
        """The service's URL and API key: the operator's own, else its connection's."""
        if self.url:
            return self.url, self.api_key
        conn = BaseHook.get_connection(self.deltasieve_conn_id)
        if not conn.host:
            raise AirflowFailException(f"connection {self.deltasieve_conn_id!r} names no host")
        return service_url(conn.host, conn.schema, conn.port), self.api_key or conn.password or None

    def execute(self, context) -> dict[str, Any] | None:
        url, api_key = self.service()
        with Client(url, api_key) as client:
            started = client.sync(self.view, wait=False, verify=self.verify)
            context["ti"].xcom_push(key="sync_id", value=started.id)
            self.log.info("sync %s of view %s at %s: %s", started.id, self.view, url, started.status)
            if started.finished:
                return self.finish(started)
            if not self.deferrable:
                try:
                    return self.finish(client.wait(self.view, started.id, timeout_s=self.timeout_s, poll_s=self.poll_s))
                except SyncFailed as failed:
                    raise failure(failed.sync) from None
        self.defer(
            trigger=DeltasieveSyncTrigger(url, self.view, started.id, api_key, self.poll_s),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout_s) if self.timeout_s else None,
        )
        return None  # not reached: defer raises

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        """Where the task resumes when the trigger fired."""
        if event["status"] != "finished":
            raise AirflowException(f"sync of view {self.view}: {event['message']}")
        return self.finish(Sync.from_json(event["sync"]))

    def finish(self, sync: Sync) -> dict[str, Any]:
        if sync.status == "failed":
            raise failure(sync)
        summary = sync_summary(sync)
        self.log.info("sync %s of view %s: %s", sync.id, self.view, summary)
        return summary
