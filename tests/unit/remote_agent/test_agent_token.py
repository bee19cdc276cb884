"""A check that behaviour over HTTP cannot show: the agent compares its token in constant time."""

from __future__ import annotations

import hmac
import sqlite3

from fastapi.testclient import TestClient

import remote_agent.app as agent_app
import remote_agent.deps as agent_deps
from remote_agent.settings import AgentSettings


def test_the_agent_compares_its_token_in_constant_time(tmp_path, compare_calls):
    db = tmp_path / "t.db"
    sqlite3.connect(db).close()
    app = agent_app.create_app(AgentSettings(db_url=f"sqlite:///{db}", token="right-token"))
    with TestClient(app) as client:
        assert client.get("/v1/schema", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        assert client.get("/v1/schema", headers={"Authorization": "Bearer right-token"}).status_code == 200
    assert compare_calls == [(b"wrong-token", b"right-token"), (b"right-token", b"right-token")]
    assert agent_deps.hmac is hmac
