"""Property-based API testing of both apps (schemathesis): no generated request gets a 5xx,
and every answer is one the OpenAPI document describes (status, content type, body).

The agent runs in process (ASGI) over a real SQLite file with a token; besides the
documented binary bodies, a second pass sends well-framed bodies — a control message built
from the control models, then Arrow data frames of generated columns — so the fuzzing gets
past the frame parser into site-query validation and the extraction itself. Its streamed
answers must end in a summary or a 4xx-class error frame, never an in-band 500.

The service is the real process of the session (`service` fixture) with a real agent
registered, a view over it and a finished sync, so generated paths sometimes name things
that exist. Names it creates start with `fz_`, so they never meet other tests' names.
"""

from __future__ import annotations

import json
import sqlite3

import pyarrow as pa
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import CHECKS, load_all_checks

from deltasieve_protocol import frames
from deltasieve_protocol.models import ExtractControl, FetchControl, RangesControl
from deltasieve_protocol.wire import HASH
from remote_agent.app import create_app as create_agent
from remote_agent.errors import AgentError
from remote_agent.settings import AgentSettings
from remote_agent.sitequery import validate_site_query
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

TOKEN = "fuzz-agent-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Examples per operation: enough to cover each parameter's shapes, bounded for CI time.
EXAMPLES = 40


def fuzz_settings(examples: int = EXAMPLES):
    # derandomize + no example database: the same examples on every run and machine.
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )


load_all_checks()
#: What every answer is checked for. positive_data_acceptance is left out: a schema cannot say
#: which byte strings are valid frames, nor which strings are SQL a view can be built from.
CHECK_NAMES = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
]
BASE_CHECKS = CHECKS.get_by_names(CHECK_NAMES)
AGENT_CHECKS = BASE_CHECKS + CHECKS.get_by_names(["ignored_auth"])


@schemathesis.serializer(frames.MEDIA_TYPE)
def _frames_body(ctx, value):
    """Bytes go as they are; a generated {control, frames} object is framed (see _framed)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        return _framed(value)
    return str(value).encode()


def _framed(value: dict) -> bytes:
    control = value.get("control", {})
    site = control.get("site")
    if isinstance(site, dict) and site.get("columns") == MATCHING:
        control = {**control, "site": {**site, "columns": SITE_COLUMNS.get(site.get("sql"), [])}}
    body = frames.json_frame(frames.CONTROL, control)
    for f in value.get("frames", []):
        columns = f.get("columns", {})
        n = min((len(v) for v in columns.values()), default=0)
        arrays = {}
        for name, values in columns.items():
            if name == HASH:  # hashes travel as bytes: make some of the right type, any length
                values = [
                    v.to_bytes(16, "big", signed=True) if isinstance(v, int) and abs(v) < 2**127 else v for v in values
                ]
            try:
                arrays[name] = pa.array(values[:n])
            except (pa.ArrowException, TypeError, ValueError, OverflowError):  # mixed types: send them as text
                arrays[name] = pa.array([None if v is None else str(v) for v in values[:n]])
        batch = (
            pa.RecordBatch.from_pydict(arrays)
            if arrays
            else pa.RecordBatch.from_pydict({"x": pa.array([], pa.int64())})
        )
        body += frames.arrow_frame(f["kind"].encode(), batch)
    return body


def _in_band_errors(response) -> None:
    """A streamed answer ends in a summary frame or an error frame that is not a 500."""
    if response.status_code != 200 or not response.headers.get("content-type", [""])[0].startswith(frames.MEDIA_TYPE):
        return
    got = list(frames.read_frames([response.content]))
    assert got and got[-1].kind in (frames.SUMMARY, frames.ERROR), (
        f"streamed answer ends with {got[-1].kind if got else 'nothing'}"
    )
    if got[-1].kind == frames.ERROR:
        error = got[-1].json()
        assert error["status"] < 500, f"in-band server error: {error}"


# -- the agent ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_app(tmp_path_factory):
    db = tmp_path_factory.mktemp("fuzz-agent") / "shop.db"
    with sqlite3.connect(db) as c:
        c.execute(
            "CREATE TABLE items (sku TEXT PRIMARY KEY, name TEXT, price DECIMAL(8,2), stock INTEGER, weight REAL, photo BLOB)"
        )
        c.execute("CREATE TABLE nokey (a INTEGER, b TEXT)")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)",
            [
                (f"sku-{i:03d}", f"item {i}" if i % 7 else None, i * 1.25, i % 5, i / 3, bytes([i % 256]) * 3)
                for i in range(200)
            ],
        )
        c.executemany("INSERT INTO nokey VALUES (?, ?)", [(i % 3, "x") for i in range(10)])
    app = create_agent(AgentSettings(db_url=f"sqlite:///{db}", token=TOKEN, max_body_bytes=64 * 1024))
    state = app.state.agent
    for sql in SITE_SQL:
        try:
            query = validate_site_query(
                sql, [sql.split(" AS ")[1].split()[0].strip(",")], state.exposed(), state.adapter.dialect
            )
        except AgentError:
            continue
        SITE_COLUMNS[sql] = [{"name": c.name, "type": str(c.type)} for c in query.columns]
    assert ITEMS_SQL in SITE_COLUMNS
    return app


def _agent_schema(app):
    return schemathesis.openapi.from_asgi("/openapi.json", app)


ITEMS_SQL = "SELECT i.sku AS sku, i.name AS name, i.price AS price, i.stock AS stock FROM items i"
#: Stands for "the site query's own output columns" in a generated body; the serializer
#: puts them in from SITE_COLUMNS, which the agent fixture fills.
MATCHING = "matching"
SITE_COLUMNS: dict[str, list[dict]] = {}
#: Site queries the structured pass picks from, besides generated text: valid ones (so the
#: extraction runs), and ones the agent must refuse (other tables, injection, bad keys).
SITE_SQL = [
    ITEMS_SQL,
    "SELECT i.sku AS sku, i.stock AS stock FROM items i WHERE i.stock > 2 AND i.name LIKE 'item%'",
    "SELECT i.sku AS sku, j.price AS price FROM items i JOIN items j ON i.sku = j.sku",
    "SELECT n.a AS a, n.b AS b FROM nokey n",
    "SELECT i.sku AS sku FROM items i; DROP TABLE items",
    'SELECT i.sku AS "sku; DELETE FROM items" FROM items i',
    "SELECT i.sku AS sku FROM sqlite_master i",
    "SELECT i.sku AS sku FROM items i WHERE i.sku IN (SELECT sku FROM items)",
    "SELECT load_extension('x') AS sku FROM items i",
    "SELECT i.photo AS sku, i.weight AS w FROM items i",
    # nested far past the bounds of deltasieve_protocol/sqlsize.py: refused by name, never a RecursionError
    "SELECT i.sku AS sku FROM items i WHERE " + "(" * 300 + "i.stock > 2" + ")" * 300,
    "SELECT i.sku AS sku FROM items i WHERE " + "NOT " * 400 + "i.stock > 2",
    "SELECT i.sku AS sku FROM items i WHERE i.stock = " + "- " * 3000 + "1",
]
KEY_NAMES = ["sku", "name", "price", "stock", "a", "b", "w", "missing"]
FRAME_COLUMNS = ["__uid", "__hash", "__rid", "__ship", "__count", "__lo_sku", "__hi_sku", "sku", "stock", "name"]


def _structured_body(model) -> dict:
    """JSON schema of a generated {control, frames} body for one extraction endpoint."""
    control = model.model_json_schema(ref_template="#/components/schemas/{model}")
    # No additional properties: the generator's effort goes into the fields that matter.
    site = {
        "type": "object",
        "additionalProperties": False,
        "required": ["sql", "key", "columns"],
        "properties": {
            "sql": {"anyOf": [{"const": ITEMS_SQL}, {"enum": SITE_SQL}]},
            "key": {
                "anyOf": [
                    {"enum": [["sku"]]},
                    {"type": "array", "minItems": 1, "maxItems": 3, "items": {"enum": KEY_NAMES}},
                ]
            },
            # The query's own columns (the extraction runs), or partial and wrong ones.
            "columns": {
                "anyOf": [
                    {"const": MATCHING},
                    {
                        "type": "array",
                        "maxItems": 3,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"enum": KEY_NAMES},
                                "type": {"enum": ["text", "int", "decimal(8,2)", "nonsense"]},
                            },
                        },
                    },
                ]
            },
        },
    }
    control["properties"]["site"] = site
    control["additionalProperties"] = False
    control.pop("$defs", None)
    column = {
        "type": "array",
        "maxItems": 4,
        "items": {"anyOf": [{"type": "integer"}, {"enum": ["sku-001", "sku-002", "zzz", ""]}, {"type": "null"}]},
    }
    frame = {
        "type": "object",
        "additionalProperties": False,
        "required": ["kind", "columns"],
        "properties": {
            "kind": {"enum": ["K", "U", "F", "T", "G", "Z"]},
            "columns": {
                "type": "object",
                "propertyNames": {"enum": FRAME_COLUMNS},
                "additionalProperties": column,
                "maxProperties": 4,
            },
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["control"],
        "properties": {"control": control, "frames": {"type": "array", "maxItems": 3, "items": frame}},
    }


def _structured_schema(app):
    """The agent's own OpenAPI document, with the extraction bodies described as JSON to frame."""
    document = json.loads(json.dumps(app.openapi()))
    for path, model in (("/v1/extract", ExtractControl), ("/v1/ranges", RangesControl), ("/v1/fetch", FetchControl)):
        body = document["paths"][path]["post"]["requestBody"]
        body["content"] = {frames.MEDIA_TYPE: {"schema": _structured_body(model)}}
    schema = schemathesis.openapi.from_dict(document)
    schema.app = app
    return schema


def _run_agent_operation(schema, label: str, examples: int) -> None:
    operation = schema[label.split(" ")[1]][label.split(" ")[0]]

    @fuzz_settings(examples)
    @given(
        case=operation.as_strategy(), auth=st.sampled_from([AUTH, AUTH, AUTH, {"Authorization": "Bearer wrong"}, {}])
    )
    def run(case, auth):
        response = case.call(headers=auth)
        case.validate_response(response, checks=AGENT_CHECKS if auth is AUTH else BASE_CHECKS, headers=auth)
        _in_band_errors(response)

    run()


AGENT_OPERATIONS = ["GET /health", "GET /v1/schema", "POST /v1/extract", "POST /v1/ranges", "POST /v1/fetch"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("label", AGENT_OPERATIONS)
def test_agent_answers_every_generated_request_without_a_server_error(agent_app, label):
    _run_agent_operation(_agent_schema(agent_app), label, EXAMPLES)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("label", AGENT_OPERATIONS[2:])
def test_agent_answers_well_framed_generated_bodies_without_a_server_error(agent_app, label):
    _run_agent_operation(_structured_schema(agent_app), label, 3 * EXAMPLES)


# -- the service ----------------------------------------------------------------------

#: Names the fuzzing may create on the shared service start with this.
PREFIX = "fz_"


@pytest.fixture(scope="module")
def seeded(api, service, tmp_path_factory, logs_dir):
    """A real agent registered with the service, a view over it and one finished sync."""
    db = tmp_path_factory.mktemp("fuzz-source") / "shop.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (sku TEXT PRIMARY KEY, name TEXT, price DECIMAL(8,2), stock INTEGER)")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)",
            [(f"sku-{i:03d}", f"item {i}", i * 1.25, i % 5) for i in range(300)],
        )
    agent = start_agent(f"sqlite:///{db}", logs_dir, token=TOKEN)
    api.add_source(f"{PREFIX}shop", agent.url, TOKEN)
    api.add_view(f"{PREFIX}items", f"SELECT i.sku, i.name, i.price FROM {PREFIX}shop.items i WHERE i.stock > 0")
    sync = api.sync(f"{PREFIX}items")
    assert sync["status"] == "succeeded", sync
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    yield schema, {"name": f"{PREFIX}items", "sync_id": sync["id"]}
    # Generated requests start syncs without waiting for them; one still reading from the
    # agent would fail into retries, holding one of the shared service's workers.
    api.wait_idle()
    agent.stop()


SERVICE_OPERATIONS = [
    "GET /health",
    "POST /v1/sources",
    "GET /v1/sources",
    "GET /v1/sources/{name}",
    "POST /v1/views",
    "GET /v1/views",
    "GET /v1/views/{name}",
    "GET /v1/views/{name}/rows",
    "GET /v1/views/{name}/statistics",
    "GET /v1/views/{name}/syncs",
    "GET /v1/views/{name}/syncs/{sync_id}",
    "GET /v1/views/{name}/syncs/{sync_id}/delta",
    "POST /v1/views/{name}/syncs",
    "GET /v1/sources/{name}/tables",
    # last: a generated change may point the fuzzing's source anywhere
    "PATCH /v1/sources/{name}",
]
#: Operations that run Spark jobs on the known view (a sync, statistics): fewer examples.
SPARK_EXAMPLES = 12
SPARK_OPERATIONS = ("POST /v1/views/{name}/syncs", "GET /v1/views/{name}/statistics")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("label", SERVICE_OPERATIONS)
def test_service_answers_every_generated_request_without_a_server_error(seeded, service, label):
    schema, existing = seeded
    method, path = label.split(" ")
    operation = schema[path][method]
    examples = SPARK_EXAMPLES if label in SPARK_OPERATIONS else EXAMPLES

    @fuzz_settings(examples)
    @given(case=operation.as_strategy(), known=st.booleans())
    def run(case, known):
        if known and case.path_parameters:
            # Half the time, name the view and sync that exist, so the fuzzing reaches past the 404.
            case.path_parameters = {
                **case.path_parameters,
                **{k: v for k, v in existing.items() if k in case.path_parameters},
            }
        if isinstance(case.body, dict) and isinstance(case.body.get("name"), str):
            case.body = {**case.body, "name": PREFIX + case.body["name"]}
        response = case.call(base_url=service.url, timeout=600)
        case.validate_response(response, checks=BASE_CHECKS)

    run()


#: Shapes of deep nesting in a view's SQL: each {} is filled with the nested part.
NESTINGS = {
    "parentheses": lambda d: "(" * d + "i.stock > 2" + ")" * d,
    "negations": lambda d: "NOT " * d + "i.stock > 2",
    "signs": lambda d: "i.stock = " + "- " * d + "1",  # spaced: "--" would start a comment
    "arithmetic": lambda d: "(" * d + "i.stock" + " + 1)" * d + " > 2",
    "subqueries": lambda d: "i.sku IN " + "(SELECT i.sku FROM fz_shop.items i WHERE " * d + "1 = 1" + ")" * d,
}


@pytest.mark.timeout(300)
def test_service_refuses_deep_nesting_in_a_view_without_a_server_error(seeded, api):
    """A view's SQL nested at any depth, in each shape, is created (201) or refused with a
    4xx — the service's parser never runs out of stack (once a 500 at 50 parentheses)."""
    statuses = set()

    @fuzz_settings(30)
    @given(shape=st.sampled_from(sorted(NESTINGS)), depth=st.integers(1, 2000))
    def run(shape, depth):
        sql = f"SELECT i.sku, i.name FROM {PREFIX}shop.items i WHERE " + NESTINGS[shape](depth)
        response = api.http.post("/v1/views", json={"name": f"{PREFIX}deep", "sql": sql})
        assert response.status_code < 500, (shape, depth, response.text[:300])
        statuses.add(response.status_code)
        if response.status_code == 201:
            assert api.http.delete(f"/v1/views/{PREFIX}deep").status_code == 204
        else:
            assert response.status_code == 422, response.text[:300]
            assert "sqlglot" not in response.text and "<class" not in response.text, response.text[:300]

    run()
    assert statuses == {201, 422}, statuses  # both sides of the bounds were reached
