"""A warehouse and an agent of different protocol versions: the agent refuses at once.

Every control message carries `protocol`. An agent that speaks another version answers
400 before any work (before it even validates the site query or reads a data frame), with
a detail naming both versions; the warehouse's AgentClient turns that into an
AgentRejected carrying the detail, which is the error a sync then fails with.
"""

from __future__ import annotations

import sqlite3

import httpx
import pytest

from deltasieve_protocol import frames
from deltasieve_protocol.models import PROTOCOL_VERSION, FetchControl, SiteSpec
from tests.support.agent_requests import QUERY_ENDPOINTS
from warehouse.agent_client import AgentClient
from warehouse.errors import AgentRejected
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

OTHER = PROTOCOL_VERSION + 1
SQL = "SELECT t.id, t.v FROM t"
COLUMNS = [{"name": "id", "type": "int"}, {"name": "v", "type": "text"}]
#: Both versions as the refusal must name them.
NAMES_BOTH = [f"protocol version {PROTOCOL_VERSION}", f"the request is version {OTHER}"]


@pytest.fixture(scope="module")
def agent(tmp_path_factory, logs_dir):
    db = tmp_path_factory.mktemp("protocol") / "t.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        c.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(50)])
    proc = start_agent(f"sqlite:///{db}", logs_dir)
    yield proc
    proc.stop()


def control(endpoint: str, protocol: int, sql: str = SQL) -> bytes:
    control_class = QUERY_ENDPOINTS[endpoint]
    extra = {} if control_class is FetchControl else {"seed": 7}
    message = control_class(protocol=protocol, site=SiteSpec(sql=sql, key=["id"], columns=COLUMNS), **extra)
    return frames.json_frame(frames.CONTROL, message.model_dump())


def post(agent, endpoint: str, body: bytes) -> httpx.Response:
    return httpx.post(agent.url + endpoint, content=body, headers={"Content-Type": frames.MEDIA_TYPE}, timeout=60)


def assert_names_both_versions(detail: str) -> None:
    for words in NAMES_BOTH:
        assert words in detail, f"{words!r} not in {detail!r}"
    assert "upgrade" in detail


@pytest.mark.parametrize("endpoint", sorted(QUERY_ENDPOINTS))
def test_a_request_of_another_protocol_version_is_a_400_naming_both_versions(agent, endpoint):
    r = post(agent, endpoint, control(endpoint, OTHER))
    assert r.status_code == 400, r.text
    assert_names_both_versions(r.json()["detail"])


@pytest.mark.parametrize("endpoint", sorted(QUERY_ENDPOINTS))
def test_the_version_is_checked_before_any_work(agent, endpoint):
    # a site query the agent would refuse (422) and a data frame of a kind no endpoint takes
    stray = frames.json_frame(frames.SUMMARY, {})
    r = post(agent, endpoint, control(endpoint, OTHER, sql="DELETE FROM t") + stray)
    assert r.status_code == 400, r.text
    assert_names_both_versions(r.json()["detail"])


@pytest.mark.parametrize("endpoint", sorted(QUERY_ENDPOINTS))
def test_a_control_message_of_another_shape_still_gets_the_version_error(agent, endpoint):
    # a later version may rename or add fields: the version, not the shape, is the news
    r = post(agent, endpoint, frames.json_frame(frames.CONTROL, {"protocol": OTHER, "query": {"text": SQL}}))
    assert r.status_code == 400, r.text
    assert_names_both_versions(r.json()["detail"])


@pytest.mark.parametrize("endpoint", sorted(QUERY_ENDPOINTS))
def test_the_agents_own_version_is_served(agent, endpoint):
    r = post(agent, endpoint, control(endpoint, PROTOCOL_VERSION))
    assert r.status_code == 200, r.text
    kinds = [f.kind for f in frames.read_frames([r.content])]
    assert kinds[-1] == frames.SUMMARY, kinds


def test_the_warehouse_client_raises_agent_rejected_naming_both_versions(agent):
    with AgentClient(agent.url) as client:
        with pytest.raises(AgentRejected) as caught:
            list(client.exchange("/v1/extract", [control("/v1/extract", OTHER)]))
    assert caught.value.status == 400
    assert_names_both_versions(str(caught.value))
    assert not caught.value.transient  # retrying cannot help: the sync fails at once with this message


def test_an_unreadable_control_message_is_still_reported_as_malformed(agent):
    r = post(
        agent, "/v1/fetch", frames.json_frame(frames.CONTROL, {"protocol": PROTOCOL_VERSION, "site": {"sql": SQL}})
    )
    assert r.status_code == 400 and "bad control message" in r.json()["detail"], r.text
    r = post(agent, "/v1/fetch", frames.json_frame(frames.CONTROL, {"protocol": "two", "site": {}}))
    assert r.status_code == 400 and "bad control message" in r.json()["detail"], r.text
