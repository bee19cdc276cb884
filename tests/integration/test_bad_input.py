"""Bad requests: each is a 4xx whose `detail` says what to fix, and nothing changes.

Extends tests/integration/test_api.py (which covers the first view-SQL rejections,
duplicate names and the basic unknown ids) with the rest of the non-PSJ forms, wrong JSON,
bad query parameters, the redefine/delete calls, and a check after every refusal that the
catalog (sources, views, sync history) is exactly as it was.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from service.settings import ServiceSettings
from tests.support.people import People
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

GOOD_SQL = "SELECT p.id, p.name, p.score FROM bi.people p WHERE p.score >= 0"
#: The largest body limit the oversized-body test will exceed (it sends limit + 1 bytes).
MAX_BODY_TO_SEND = 64 * 1024 * 1024


@pytest.fixture(scope="module")
def bi(api, tmp_path_factory, logs_dir):
    people = People(tmp_path_factory.mktemp("bad_input") / "people.db", rows=200)
    with sqlite3.connect(people.path) as c:
        c.execute("CREATE TABLE cities (code TEXT PRIMARY KEY, name TEXT NOT NULL)")
        c.execute("INSERT INTO cities VALUES ('OSL', 'Oslo'), ('ZRH', 'Zürich')")
    agent = start_agent(f"sqlite:///{people.path}", logs_dir)
    api.add_source("bi", agent.url)
    api.add_view("bi_v", GOOD_SQL)
    yield api
    agent.stop()


def snapshot(api) -> dict:
    """Everything a refused request must leave as it was."""
    return {
        "sources": api.http.get("/v1/sources").json(),
        "views": api.http.get("/v1/views").json(),
        "syncs": api.http.get("/v1/views/bi_v/syncs").json(),
    }


def refused(api, method: str, path: str, status: int, words: list[str], **request) -> str:
    before = snapshot(api)
    r = api.http.request(method, path, **request)
    assert r.status_code == status, f"{method} {path}: {r.status_code} {r.text}"
    body = r.json()
    assert body.get("detail"), body
    detail = json.dumps(body["detail"], ensure_ascii=False) if not isinstance(body["detail"], str) else body["detail"]
    for word in words:
        assert word.lower() in detail.lower(), f"{word!r} not in {detail}"
    assert "<class" not in detail and "sqlglot" not in detail, f"the parser's internals leak: {detail}"
    assert snapshot(api) == before, f"{method} {path} changed the catalog"
    return detail


VIEW_SQL_CASES = [
    ("SELECT p.id, sum(p.score) AS s FROM bi.people p", ["aggregate"]),
    ("SELECT p.id FROM bi.people p GROUP BY p.id HAVING count(*) > 1", ["not supported"]),
    ("SELECT p.id, row_number() OVER (ORDER BY p.score) AS r FROM bi.people p", ["window"]),
    ("SELECT p.id FROM bi.people p UNION SELECT q.id FROM bi.people q", ["UNION"]),
    ("SELECT p.id, c.code FROM bi.people p RIGHT JOIN bi.cities c ON p.city = c.name", ["outer join", "inner join"]),
    ("SELECT p.id, c.code FROM bi.people p FULL OUTER JOIN bi.cities c ON p.city = c.name", ["outer join"]),
    ("SELECT p.id, c.code FROM bi.people p, bi.cities c", ["cross join"]),
    ("SELECT p.id FROM bi.people p WHERE EXISTS (SELECT 1 FROM bi.cities c)", ["subquer"]),
    ("SELECT q.id FROM (SELECT p.id FROM bi.people p) q", []),
    ("WITH q AS (SELECT p.id FROM bi.people p) SELECT q.id FROM q", ["WITH"]),
    ("SELECT p.id FROM bi.people p ORDER BY p.id", ["ORDER BY"]),
    ("SELECT p.id FROM bi.people p LIMIT 10 OFFSET 5", ["LIMIT"]),
    ("SELECT * FROM bi.people p", ["SELECT *", "list the columns"]),
    ("SELECT p.id, p.score + 1 AS s FROM bi.people p", ["expressions"]),
    ("SELECT p.id FROM bi.people p; DROP TABLE people", ["one statement"]),
    ("SELECT p.id FROM bi.people p WHERE", ["cannot be parsed", "the WHERE clause has no condition"]),
    ("SELECT p.id FROM bi.people p WHERE p.score BETWEEN 1", ["cannot be parsed", "both bounds"]),
    ("SELECT p.id FROM bi.people p WHERE " + "(" * 50 + "p.score > 0" + ")" * 50, ["parentheses nest 50 deep"]),
    ("SELECT p.id FROM bi.people p WHERE " + "NOT " * 60 + "p.score > 0", ["nests 65 levels deep"]),
    ("SELECT p.id FROM bi.people p WHERE " + "NOT " * 400 + "p.score > 0", ["cannot be parsed", "nests too deeply"]),
    ("   ", ["empty"]),
    ("UPDATE bi.people SET score = 0", ["SELECT"]),
    ("SELECT p.id FROM people p", ["source.table"]),
    ("SELECT p.id FROM x.bi.people p", ["source 'x' is not registered"]),  # source.schema.table
    ("SELECT p.id FROM bi.main.people p", ["no table 'main.people'", "attached databases are not read"]),
    ("SELECT p.id FROM w.x.y.z p", ["only tables can be read"]),
    ("SELECT p.id FROM bi.peeple p", ["peeple", "people"]),
    ("SELECT p.id, p.nmae FROM bi.people p", ["nmae", "name"]),
    ("SELECT p.id, c.name FROM bi.people p JOIN bi.cities c ON p.city = c.name", ["key", "code"]),
    ("SELECT p.id, p.name AS id FROM bi.people p", ["twice"]),
    ("SELECT p.id FROM bi.people p WHERE p.name = 5", ["different kinds (number and text)", "p.name = 5"]),
    ("SELECT p.id FROM bi.people p WHERE p.score IN (1, 'high')", ["different kinds (number and text)"]),
    ("SELECT p.id, c.code FROM bi.people p JOIN bi.cities c ON p.id = c.code", ["different kinds (number and text)"]),
]


@pytest.mark.parametrize("case", range(len(VIEW_SQL_CASES)), ids=[f"sql{i}" for i in range(len(VIEW_SQL_CASES))])
def test_view_sql_the_service_cannot_maintain(bi, case):
    sql, words = VIEW_SQL_CASES[case]
    refused(bi, "POST", "/v1/views", 422, words, json={"name": f"bad_{case}", "sql": sql})


BODY_CASES = [
    # (method, path, body: bytes or JSON value, status, words)
    ("POST", "/v1/views", b"{not json", 422, ["json", "double quotes", "position 1"]),
    ("POST", "/v1/views", b'{"name": "v2", "sql": "SELECT', 422, ["json", "unterminated string"]),
    ("POST", "/v1/views", b"", 422, ["body"]),
    ("POST", "/v1/views", [], 422, ["object"]),
    ("POST", "/v1/views", "SELECT p.id FROM bi.people p", 422, ["object"]),
    ("POST", "/v1/views", {"name": 5, "sql": GOOD_SQL}, 422, ["name", "string"]),
    ("POST", "/v1/views", {"name": "v2", "sql": ["SELECT"]}, 422, ["sql", "string"]),
    ("POST", "/v1/views", {"name": "v2", "sql": None}, 422, ["sql"]),
    ("POST", "/v1/views", {"name": "v2"}, 422, ["sql", "missing"]),
    ("POST", "/v1/views", {"name": "v2", "sql": GOOD_SQL, "strategy": "fastest"}, 422, ["strategy", "group_hash"]),
    ("POST", "/v1/views", {"name": "v2", "sql": GOOD_SQL, "key": ["id"]}, 422, ["key", "extra"]),
    ("POST", "/v1/views", {"name": "bad-name", "sql": GOOD_SQL}, 422, ["name", "pattern"]),
    ("POST", "/v1/views", {"name": "x" * 64, "sql": GOOD_SQL}, 422, ["name"]),
    ("POST", "/v1/views", {"name": "bi_v", "sql": GOOD_SQL}, 409, ["bi_v", "already exists"]),
    ("POST", "/v1/sources", {"name": "bi", "url": "http://127.0.0.1:1"}, 409, ["bi", "already exists"]),
    ("POST", "/v1/sources", {"name": "s2", "url": "http://a b"}, 422, ["url"]),
    ("POST", "/v1/sources", {"name": "s2", "url": "http://127.0.0.1:1", "token": 123}, 422, ["token", "string"]),
    ("POST", "/v1/sources", {"name": ["s2"], "url": "http://127.0.0.1:1"}, 422, ["name"]),
    ("POST", "/v1/sources", b"[1, 2", 422, ["json"]),
    ("PUT", "/v1/views/bi_v", {"sql": "SELECT p.id, count(*) FROM bi.people p GROUP BY p.id"}, 422, ["GROUP BY"]),
    ("PUT", "/v1/views/bi_v", {"sql": "SELECT p.name FROM bi.people p"}, 422, ["key", "id"]),
    ("PUT", "/v1/views/bi_v", {"sql": "SELECT p.id FROM nosuch.people p"}, 422, ["nosuch", "not registered"]),
    ("PUT", "/v1/views/bi_v", {"name": "other", "sql": GOOD_SQL}, 422, ["name", "extra"]),
    ("PUT", "/v1/views/bi_v", b"{oops", 422, ["json"]),
    ("PUT", "/v1/views/nope", {"sql": GOOD_SQL}, 404, ["nope", "not found", "POST /v1/views"]),
]


@pytest.mark.parametrize(
    "method, path, body, status, words", BODY_CASES, ids=[f"body{i}" for i in range(len(BODY_CASES))]
)
def test_malformed_or_wrongly_typed_bodies(bi, method, path, body, status, words):
    request = (
        {"content": body, "headers": {"content-type": "application/json"}}
        if isinstance(body, bytes)
        else {"json": body}
    )
    refused(bi, method, path, status, words, **request)


UNKNOWN_AND_PARAMS = [
    ("GET", "/v1/sources/nosuch", 404, ["nosuch"]),
    ("GET", "/v1/views/nosuch/rows", 404, ["nosuch"]),
    ("GET", "/v1/views/nosuch/statistics", 404, ["nosuch"]),
    ("GET", "/v1/views/nosuch/syncs", 404, ["nosuch"]),
    ("DELETE", "/v1/views/nosuch", 404, ["nosuch"]),
    ("GET", "/v1/views/bi_v/syncs/not-a-sync", 404, ["not-a-sync"]),
    ("GET", "/v1/views/bi_v/syncs/not-a-sync/delta", 404, ["not-a-sync"]),
    ("GET", "/v1/views/bi_v/rows", 409, ["not been loaded", "syncs"]),
    ("POST", "/v1/views/bi_v/syncs?mode=bogus", 422, ["mode", "normal", "verify"]),
    ("POST", "/v1/views/bi_v/syncs?wait=maybe", 422, ["wait", "bool"]),
    ("POST", "/v1/views/bi_v/syncs?wait=true&mode=", 422, ["mode"]),
    ("POST", "/v1/views/nosuch/syncs?wait=true", 404, ["nosuch"]),
]


@pytest.mark.parametrize(
    "method, path, status, words", UNKNOWN_AND_PARAMS, ids=[f"{m} {p}" for m, p, _, _ in UNKNOWN_AND_PARAMS]
)
def test_unknown_ids_and_bad_query_parameters(bi, method, path, status, words):
    refused(bi, method, path, status, words)


def test_oversized_body_is_413(bi):
    size = ServiceSettings.model_fields["max_body_bytes"].default
    assert size <= MAX_BODY_TO_SEND, f"default body limit {size} is more than this test sends"
    body = json.dumps({"name": "big_v", "sql": GOOD_SQL + " " * size}).encode()
    refused(bi, "POST", "/v1/views", 413, [str(size)], content=body, headers={"content-type": "application/json"})
