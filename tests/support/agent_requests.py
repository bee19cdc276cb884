"""Requests to the agent's extraction endpoints built as the service builds them, the
site queries an attacker might send instead of a SELECT over exposed columns, and what
an answer's summary must hold."""

from __future__ import annotations

import httpx
import pytest

from deltasieve_protocol import frames
from deltasieve_protocol.models import ChangeTokenControl, ExtractControl, FetchControl, RangesControl, SiteSpec
from remote_agent.timings import PHASES, READER_PHASES

#: Seconds the summed timings may exceed elapsed_s by: each is rounded to 0.1 ms apart.
TIMINGS_SLACK_S = 0.001


def check_timings(timings: dict, elapsed_s: float) -> None:
    """Every phase of an answer's `timings`, none negative, together no longer than the answer:
    all of them when the answer's thread read the rows itself (it never waited for a reader),
    else the reader's phases and the thread's own each."""
    assert sorted(timings) == sorted(PHASES), timings
    assert all(isinstance(s, float | int) and s >= 0 for s in timings.values()), timings
    slack = TIMINGS_SLACK_S * len(PHASES)
    reader = sum(timings[p] for p in READER_PHASES)
    own = sum(timings.values()) - reader
    if timings["wait_s"] == 0:
        assert own + reader <= elapsed_s + slack, (timings, elapsed_s)
    else:
        assert own <= elapsed_s + slack and reader <= elapsed_s + slack, (timings, elapsed_s)


#: The endpoints that run or check a site query, with the control message each starts with.
QUERY_ENDPOINTS = {
    "/v1/extract": ExtractControl,
    "/v1/fetch": FetchControl,
    "/v1/ranges": RangesControl,
    "/v1/change_token": ChangeTokenControl,
}


def site_body(endpoint: str, sql: str, key: list[str], columns: list[dict]) -> bytes:
    """A request body with only the control frame: the query is checked before anything else is read."""
    control_class = QUERY_ENDPOINTS[endpoint]
    extra = {"seed": 7} if "seed" in control_class.model_fields else {}
    control = control_class(site=SiteSpec(sql=sql, key=key, columns=columns), **extra)
    return frames.json_frame(frames.CONTROL, control.model_dump())


def post_site_query(
    client: httpx.Client, endpoint: str, sql: str, key: list[str], columns: list[dict] | None = None
) -> httpx.Response:
    columns = columns if columns is not None else [{"name": k, "type": "text"} for k in key]
    return client.post(
        endpoint, content=site_body(endpoint, sql, key, columns), headers={"Content-Type": frames.MEDIA_TYPE}
    )


def bearer_client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def assert_refused(response: httpx.Response, words: list[str], secret: str) -> None:
    """A 4xx whose detail names the problem (one of `words`) and leaks nothing of `secret`."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    detail = response.json()["detail"]
    assert any(w.lower() in detail.lower() for w in words), f"{detail!r} mentions none of {words}"
    assert secret not in response.text


def answer_frames(response: httpx.Response) -> list[frames.Frame]:
    return [f.decode() for f in frames.read_frames([response.content])]


# Every payload is written against this layout: `items` is exposed with columns sku, name
# and stock (its `cost` column is hidden by --allow), `secrets` exists but is not exposed.
#: (site query, words the refusal must contain (any of them, case-insensitive)).
REFUSED = [
    # several statements, also behind comments
    ("SELECT i.sku FROM items i; DROP TABLE items", ["one statement"]),
    ("SELECT i.sku FROM items i; DELETE FROM items", ["one statement"]),
    ("SELECT i.sku FROM items i /* harmless */; UPDATE items SET name = 'x' --", ["one statement"]),
    ("SELECT i.sku FROM items i WHERE i.sku = i.sku -- comment\n; DROP TABLE items", ["one statement"]),
    ("SELECT i.sku FROM items i WHERE i.name = 'a' OR 1 = 1; DROP TABLE items", ["one statement"]),
    # statements other than SELECT
    ("DELETE FROM items", ["only a select"]),
    ("INSERT INTO items (sku) VALUES ('x')", ["only a select"]),
    ("UPDATE items SET name = 'x'", ["only a select"]),
    ("DROP TABLE items", ["only a select"]),
    ("ATTACH DATABASE '/tmp/deltasieve-attack.db' AS evil", ["only a select", "cannot be parsed"]),
    ("PRAGMA query_only = 0", ["only a select", "cannot be parsed"]),
    ("", ["empty"]),
    # identifiers that try to close their quotes
    ('SELECT i.sku FROM "items""; DROP TABLE items; --" i', ["not exposed"]),
    ('SELECT i."sku""; DROP TABLE items; --" FROM items i', ["does not exist"]),
    ('SELECT i.sku FROM items i WHERE i."name"" = 1; DROP TABLE items; --" = 1', ["does not exist"]),
    # tables and columns outside the allow list, in every position
    ("SELECT s.id FROM secrets s", ["not exposed"]),
    ("SELECT i.sku FROM items i JOIN secrets s ON s.id = i.stock", ["not exposed"]),
    ("SELECT i.sku FROM items i, secrets s", ["cross join", "not exposed"]),
    ("SELECT i.sku FROM main.items i", ["not exposed", "qualifier"]),
    ("SELECT i.sku FROM sqlite_master i", ["not exposed"]),
    ("SELECT i.cost FROM items i", ["cost"]),
    ("SELECT i.sku, i.cost AS name FROM items i", ["cost"]),
    ("SELECT i.sku FROM items i WHERE i.cost > 0", ["cost"]),
    ("SELECT i.sku FROM items i JOIN items j ON j.cost = i.stock AND j.sku = i.sku", ["cost"]),
    ("SELECT cost AS sku FROM items", ["cost"]),
    ("SELECT * FROM items", ["select *"]),
    ("SELECT i.* FROM items i", ["select *"]),
    # set operations and subqueries reading other tables
    ("SELECT i.sku FROM items i UNION SELECT s.id FROM secrets s", ["union"]),
    ("SELECT i.sku FROM items i UNION ALL SELECT s.password FROM secrets s", ["union"]),
    ("SELECT i.sku FROM items i WHERE i.sku IN (SELECT s.password FROM secrets s)", ["subquer"]),
    ("SELECT i.sku FROM items i WHERE EXISTS (SELECT 1 FROM secrets)", ["subquer"]),
    ("SELECT i.sku FROM items i WHERE (SELECT count(*) FROM secrets) > 0", ["subquer", "aggregate"]),
    ("SELECT i.sku FROM items i WHERE i.name LIKE '%' || (SELECT password FROM secrets)", ["subquer"]),
    ("SELECT i.sku FROM (SELECT id AS sku FROM secrets) i", ["subquer", "only tables"]),
    ("WITH x AS (DELETE FROM items RETURNING sku) SELECT x.sku FROM x", ["cte", "with"]),
    ("WITH x AS (SELECT s.id AS sku FROM secrets s) SELECT x.sku FROM x", ["cte", "with"]),
    # functions with side effects or that read the server's files
    ("SELECT i.sku, pg_sleep(5) AS z FROM items i", ["function", "expressions in the select list"]),
    ("SELECT i.sku FROM items i WHERE pg_sleep(5) IS NULL", ["pg_sleep"]),
    ("SELECT i.sku FROM items i WHERE lo_import('/etc/passwd') > 0", ["lo_import"]),
    ("SELECT i.sku FROM items i WHERE pg_read_file('/etc/passwd') = ''", ["pg_read_file"]),
    (
        "SELECT i.sku FROM items i WHERE set_config('default_transaction_read_only', 'off', false) = 'off'",
        ["set_config"],
    ),
    ("SELECT i.sku FROM items i WHERE load_extension('/tmp/evil.so') IS NULL", ["load_extension"]),
    ("SELECT i.sku FROM items i WHERE randomblob(1000000000) IS NULL", ["randomblob", "function"]),
    # clauses that write or lock
    ("SELECT i.sku INTO stolen FROM items i", ["into"]),
    ("SELECT i.sku FROM items i FOR UPDATE", ["for update", "locking", "cannot be parsed"]),
    ("SELECT i.sku FROM items i FOR SHARE", ["for update", "locking", "cannot be parsed"]),
    # parameters the agent would bind
    ("SELECT i.sku FROM items i WHERE i.name = ?", ["parameter"]),
    # nesting that would exhaust the parser's stack
    ("SELECT i.sku FROM items i WHERE " + "(" * 50 + "i.stock = 1" + ")" * 50, ["parentheses nest 50 deep"]),
    ("SELECT i.sku FROM items i WHERE " + "NOT " * 400 + "i.stock = 1", ["cannot be parsed", "nests too deeply"]),
]

#: Hostile text where the language allows any text: aliases and string literals, with the
#: output columns of each query. They are names and values, quoted on the way out: the
#: agent runs them and nothing else.
INERT = [
    ('SELECT i.sku, i.name AS "n""; DROP TABLE items; --" FROM items i', ["sku", 'n"; DROP TABLE items; --']),
    ("SELECT x.sku FROM items AS \"x\" WHERE x.name <> '''; DROP TABLE items; --'", ["sku"]),
    ("SELECT i.sku FROM items i WHERE i.name = 'a'' OR 1=1; DELETE FROM items; --'", ["sku"]),
    ('SELECT "i; DROP TABLE items".sku FROM items AS "i; DROP TABLE items"', ["sku"]),
    ("SELECT i.sku /* ; DROP TABLE items */ FROM items i", ["sku"]),
]


def inert_request(client: httpx.Client, endpoint: str, sql: str, names: list[str]) -> list[frames.Frame]:
    """Send an INERT query; it must be answered in full."""
    r = post_site_query(client, endpoint, sql, ["sku"], [{"name": n, "type": "text"} for n in names])
    assert r.status_code == 200, r.text
    got = answer_frames(r)
    assert got[-1].kind == frames.SUMMARY, [f.json() for f in got if f.kind == frames.ERROR]
    return got


def payload_params(payloads):
    return [pytest.param(sql, words, id=f"{n:02d}") for n, (sql, words) in enumerate(payloads)]
