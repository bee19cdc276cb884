"""Secrets the service keeps (service/secrets.py), through a service of this module's own whose
environment holds an agent's token and a PostgreSQL warehouse's URL.

Sources whose token is `env:NAME`, `file:/PATH` or literal sync against an agent started with
--token; a PostgreSQL destination given as `env:NAME` is applied. A reference that does not
resolve is a 422 at registration, a failed sync or a lagging destination naming it, never a
5xx. Then the data dir and the service's logs are searched for the token and the password:
neither is there, the literal token stored only encrypted, and it still works after a restart.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.support.people import VIEW_SQL, People
from workloads.harness import Api, Process, start_agent, start_service

pytestmark = pytest.mark.integration

TOKEN = f"agent-token-{secrets.token_hex(12)}"
TOKEN_VARIABLE, URL_VARIABLE, UNSET = "DS_TEST_AGENT_TOKEN", "DS_TEST_WAREHOUSE_URL", "DS_TEST_NOT_SET"
ROLE, PASSWORD, TABLE = "secrets_wh", f"wh-{secrets.token_hex(12)}", "wh.people"
CATCH_UP_S = 120


class Setting:
    """The module's agent, warehouse database and service (restarted by the last test)."""

    def __init__(self, root: Path, logs: Path, agent_url: str, env: dict):
        self.root, self.logs, self.agent_url, self.env = root, logs, agent_url, env
        self.data = root / "warehouse"
        self.token_file = root / "agent.token"
        self.token_file.write_text(TOKEN + "\n")
        self.proc: Process | None = None
        self.api: Api | None = None
        self.start()

    def start(self) -> Api:
        self.proc = start_service(self.data, self.logs, env=self.env)
        self.api = Api(self.proc.url)
        return self.api

    def kill(self) -> None:
        """Stop the service at once (SIGKILL to its process group, Spark's JVM included)."""
        assert self.proc is not None and self.api is not None
        self.api.close()
        self.proc.kill()

    def stop(self) -> None:
        if self.api is not None:
            self.api.close()
        if self.proc is not None:
            self.proc.stop()


@pytest.fixture(scope="module")
def setting(tmp_path_factory, logs_dir, postgres):
    root = tmp_path_factory.mktemp("stored-secrets")
    people = People(root / "people.db", rows=300, seed=48)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir, token=TOKEN)
    with psycopg.connect(postgres.owner_url, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
        owner.execute(f"CREATE SCHEMA wh AUTHORIZATION {ROLE}")
        owner.execute(f'GRANT CONNECT, TEMPORARY ON DATABASE "{postgres.name}" TO {ROLE}')
    parts = urlsplit(postgres.owner_url)
    url = urlunsplit(parts._replace(netloc=f"{ROLE}:{PASSWORD}@{parts.hostname}:{parts.port}"))
    logs = tmp_path_factory.mktemp("stored-secrets-logs")  # the service's own: all of them are searched
    setting = Setting(root, logs, agent.url, {TOKEN_VARIABLE: TOKEN, URL_VARIABLE: url})
    yield setting
    setting.stop()
    agent.stop()


def _stored_tokens(data: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{data / 'catalog.db'}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT name, token FROM sources").fetchall())


def _destination(api: Api, view: str, kind: str) -> dict:
    return next(d for d in api.http.get(f"/v1/views/{view}").json()["destinations"] if d["kind"] == kind)


def test_sources_and_a_destination_given_by_reference_sync_and_publish(setting, postgres):
    api = setting.api
    by_env = api.add_source("by_env", setting.agent_url, f"env:{TOKEN_VARIABLE}")
    by_file = api.add_source("by_file", setting.agent_url, f"file:{setting.token_file}")
    literal = api.add_source("literal", setting.agent_url, TOKEN)
    assert by_env["token_reference"] == f"env:{TOKEN_VARIABLE}" and by_env["has_token"], by_env
    assert by_file["token_reference"] == f"file:{setting.token_file}", by_file
    assert literal["has_token"] and literal["token_reference"] is None and TOKEN not in str(literal), literal
    stored = _stored_tokens(setting.data)
    assert stored["by_env"] == f"env:{TOKEN_VARIABLE}" and stored["by_file"] == f"file:{setting.token_file}"
    assert stored["literal"].startswith("fernet:"), "a literal token is stored encrypted"

    destinations = [{"kind": "delta"}, {"kind": "postgres", "url": f"env:{URL_VARIABLE}", "table": TABLE}]
    view = api.add_view("env_people", VIEW_SQL.format(source="by_env"), destinations=destinations)
    assert _destination(api, "env_people", "postgres")["url"] == f"env:{URL_VARIABLE}", view
    sync = api.sync("env_people")
    assert sync["status"] == "succeeded", sync
    deadline = time.monotonic() + CATCH_UP_S
    while (pg := _destination(api, "env_people", "postgres"))["applied_sync"] != sync["id"]:
        assert time.monotonic() < deadline and pg["error"] is None, pg
        time.sleep(0.3)
    with psycopg.connect(postgres.owner_url) as owner:
        held = owner.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    assert held is not None and held[0] == len(api.rows("env_people")) > 0

    for source in ("by_file", "literal"):
        api.add_view(f"{source}_people", VIEW_SQL.format(source=source), destinations=[])
        assert api.sync(f"{source}_people")["status"] == "succeeded"


def test_a_reference_that_does_not_resolve_is_told_by_its_name(setting):
    api = setting.api
    unset = api.http.post("/v1/sources", json={"name": "unset", "url": setting.agent_url, "token": f"env:{UNSET}"})
    assert unset.status_code == 422 and f"env:{UNSET}" in unset.json()["detail"], unset.text
    missing = setting.root / "no-such.token"
    absent = api.http.post("/v1/sources", json={"name": "absent", "url": setting.agent_url, "token": f"file:{missing}"})
    assert absent.status_code == 422 and f"file:{missing}" in absent.json()["detail"], absent.text

    # a token file that goes away: the sync fails naming it, and works again once it is back
    setting.token_file.unlink()
    try:
        r = api.http.post("/v1/views/by_file_people/syncs", params={"wait": "true"})
        assert r.status_code == 200, r.text
        failed = r.json()
        assert failed["status"] == "failed" and failed["error_code"] == "secret_unavailable", failed
        assert f"file:{setting.token_file}" in failed["error"], failed
    finally:
        setting.token_file.write_text(TOKEN + "\n")
    assert api.sync("by_file_people")["status"] == "succeeded"

    # a destination whose URL's variable is not set lags, saying which; the view syncs on
    lagging = [{"kind": "postgres", "url": f"env:{UNSET}", "table": "wh.lagging"}]
    api.add_view("lagging_people", VIEW_SQL.format(source="literal"), destinations=lagging)
    assert api.sync("lagging_people")["status"] == "succeeded"
    deadline = time.monotonic() + CATCH_UP_S
    while not (pg := _destination(api, "lagging_people", "postgres"))["error"]:
        assert time.monotonic() < deadline, pg
        time.sleep(0.3)
    assert f"env:{UNSET}" in pg["error"] and pg["lag_syncs"] == 1 and pg["applied_sync"] is None, pg


def test_no_secret_is_kept_in_clear_and_the_literal_works_after_a_restart(setting):
    def search() -> list[str]:
        found = []
        for root in (setting.data, setting.logs):
            for path in root.rglob("*"):
                if path.is_file():
                    content = path.read_bytes()
                    found += [f"{path}: {s}" for s in (TOKEN, PASSWORD) if s.encode() in content]
        return found

    assert search() == []
    setting.kill()  # no stop to flush anything: what is on disk now is what a thief would find
    assert search() == []
    api = setting.start()
    assert api.sync("literal_people")["status"] == "succeeded", "the encrypted token opens after a restart"
    assert search() == []
