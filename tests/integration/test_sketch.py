"""The sketch and auto strategies on a table large enough to matter (20,000 rows, SQLite).

No change costs a small fraction of the load (the main stage, when the statistics expect
changes; the probe, when they do not: test_small_syncs.py); far more changes than the statistics predict
make the table fail to peel, and the sync still comes out exact through the group-hash
fall-back; an audit (mode=verify) agrees with the full read; auto records what it chose.
After a load, a fall-back or an audit the next sync takes a table built in the background.
The randomized rounds of test_sync.py cover sketch and auto on every engine and key kind.
"""

from __future__ import annotations

import pytest

from tests.support.agent_requests import check_timings
from tests.support.mapped_files import numba_files, process_tree
from tests.support.oracle import check_sync
from tests.support.people import KEY, VIEW_SQL, People
from warehouse.planning.cost_model import REQUEST_BYTES
from workloads.harness import start_agent

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sketch_agent(tmp_path_factory, logs_dir, api):
    """The people table and the agent on it, the source `sk`."""
    people = People(tmp_path_factory.mktemp("sketch") / "people.db", rows=20_000, seed=9)
    # no change token: the no-change sync below is the sketch's own (the token's: test_small_syncs.py)
    agent = start_agent(f"sqlite:///{people.path}", logs_dir, extra=["--no-change-token"])
    api.add_source("sk", agent.url)
    yield people, agent
    agent.stop()


@pytest.fixture(scope="module")
def people(sketch_agent):
    return sketch_agent[0]


def _sync(api, people, view, before):
    sync = api.sync(view)
    check_sync(api, view, KEY, before, people.truth(), sync)
    return sync["metrics"]


def _moved(m: dict) -> int:
    return m["bytes_to_agent"] + m["bytes_from_agent"]


def test_sketch_costs_the_change_not_the_table(api, people):
    api.add_view("sk_people", VIEW_SQL.format(source="sk"), strategy="sketch")
    load = _sync(api, people, "sk_people", {})
    before = people.truth()
    unpeeled = 0
    for round_ in range(3):
        people.change(updates=100, inserts=40, deletes=20)
        m = _sync(api, people, "sk_people", before)
        before = people.truth()
        assert m.get("fallback") is None and m["sketch_cells"] > 0, m
        # the first sketch sync takes the fragment's table, built in the background when the
        # load committed (not on its own critical path); later ones keep it up to date
        assert bool(m.get("sketch_rebuilt")) == (round_ == 0), m
        assert bool(m.get("sketch_prepared")) == (round_ == 0) and m.get("sketch_built_inline_s") is None, m
        # the first sync after the load guesses: a probe first, which does not peel a few hundred
        # differences; later ones expect them and send the main stage first (budget.probe_pays).
        # It is sized to fail about one sync in a hundred (a fresh secret each load): then the
        # agent's wider table, still from the same read, resolves it as one more stage
        unpeeled += bool(m.get("peel_failed"))
        probe = round_ == 0
        assert m["sketch_stages"] == probe + 1 + bool(m.get("peel_failed")), m
        assert m["rows_scanned"] == len(before), m
        # the agent's phases, summed over both stages, fit in the time it spent answering
        check_timings(m["agent_timings"], m["agent_seconds"])
        assert m["agent_timings"]["read_s"] > 0 and m["agent_timings"]["hash_s"] > 0, m
        _check_where_the_time_went(m)
    # the statistics predict about what happens each round, and the table is sized for it
    assert 100 < m["differences_expected"] < 1_000 and unpeeled <= 1, m
    # a sync that finds nothing where the statistics expect a few hundred differences: the
    # main stage alone (a probe would not pay: budget.probe_pays), its table and a request's
    # fixed cost (twice REQUEST_BYTES: headers, control and a summary with timings), no row; less than a
    # sync of the change it was sized for, and a few per cent of the load
    still = _sync(api, people, "sk_people", before)
    assert still["differences_found"] == 0 and still["sketch_stages"] == 1, still
    assert _moved(still) <= still["sketch_bytes"] + 2 * REQUEST_BYTES and _moved(still) < _moved(m), (still, m)
    assert _moved(still) < 0.05 * _moved(load), f"a no-change sync moved {_moved(still)} bytes, the load {_moved(load)}"


def _check_where_the_time_went(m: dict) -> None:
    """A sketch sync's site says when each call ran and the agent's share of it, the service's
    own parts of the exchange, and what was read ahead beside it."""
    (site,) = m["sites"]
    calls = site["calls"]
    assert sum(c["call"] == "POST /v1/sketch" for c in calls) == m["sketch_stages"], calls
    for call, after in zip(calls, calls[1:], strict=False):
        assert call["at_s"] + call["seconds"] <= after["at_s"] + 0.002, calls  # one after the other
    for call in calls:
        if call["call"].startswith(("POST /v1/sketch", "POST /v1/fetch")):  # each says its own time
            assert 0 <= call["agent_s"] <= call["seconds"] + 0.002, call
    phases = site["phases"]
    cells = 0.0 if m.get("updates_whole") else phases["changed_cells"]  # updated rows came whole: no cells
    assert "read_touched" in phases and (m.get("updates_whole") or "changed_cells" in phases), phases
    assert phases["read_touched"] + cells <= phases["exchange_units"] + 0.002, phases
    # started with the first request, stopped when the answer named the keys
    assert m["read_ahead"]["bytes"] >= 0 and m["read_ahead"]["seconds"] <= phases["exchange_units"], m


def test_a_burst_within_the_agents_headroom_peels_without_a_second_read(api, people):
    api.add_view("sk_wide", VIEW_SQL.format(source="sk"), strategy="sketch")
    _sync(api, people, "sk_wide", {})
    before = people.truth()
    for _ in range(2):
        people.change(updates=40, inserts=10, deletes=5)
        _sync(api, people, "sk_wide", before)
        before = people.truth()
    people.change(updates=400, inserts=100, deletes=50)  # ten times what the statistics expect
    m = _sync(api, people, "sk_wide", before)
    # no probe (the statistics expect changes), the main stage, which fails, and a wider one
    assert m["peel_failed"] and m.get("fallback") is None and m["sketch_stages"] == 2, m
    # then the changed cells of the updated rows (and any whose digests collided, whole), unless
    # they were asked for whole; no change-token request: the load learnt that this agent gives none
    cells = 0 if m.get("updates_whole") else 1 + bool(m["cells_fallback_rows"])
    assert m["rows_scanned"] == len(people.truth()) and m["round_trips"] == 2 + cells, m


def test_far_more_changes_than_predicted_still_give_the_exact_delta(api, people):
    api.add_view("sk_burst", VIEW_SQL.format(source="sk"), strategy="sketch")
    _sync(api, people, "sk_burst", {})
    before = people.truth()
    _sync(api, people, "sk_burst", before)  # no change: the statistics expect almost nothing
    people.change(updates=3_000, inserts=500, deletes=500)
    m = _sync(api, people, "sk_burst", before)
    assert m["peel_failed"] and m["fallback"] == "group_hash", m
    before = people.truth()
    people.change(updates=50, inserts=10, deletes=5)
    m = _sync(api, people, "sk_burst", before)
    assert m["sketch_rebuilt"] and m.get("fallback") is None, "after a fall-back the table is rebuilt from the fragment"
    assert m["sketch_prepared"], "in the background, after the fall-back's commit"


def test_an_audit_of_a_sketch_view_agrees_and_the_next_sync_is_exact(api, people):
    api.add_view("sk_audit", VIEW_SQL.format(source="sk"), strategy="sketch")
    before = {}
    for _ in range(2):
        _sync(api, people, "sk_audit", before)
        before = people.truth()
    people.change(updates=60, inserts=20, deletes=10)
    r = api.http.post("/v1/views/sk_audit/syncs", params={"wait": "true", "mode": "verify"})
    assert r.status_code == 200, r.text
    audit = r.json()
    check_sync(api, "sk_audit", KEY, before, people.truth(), audit)
    assert audit["metrics"]["verify"]["divergent_rows"] == 0
    before = people.truth()
    people.change(updates=60, inserts=20, deletes=10)
    m = _sync(api, people, "sk_audit", before)
    assert m["sketch_rebuilt"], "an audit keeps the full read's fragment: its table is built anew"
    assert m["sketch_prepared"], "in the background, after the audit's commit"


def test_auto_chooses_by_expected_bytes_and_says_so(api, people):
    api.add_view("sk_auto", VIEW_SQL.format(source="sk"), strategy="auto")
    before = {}
    for _ in range(3):
        m = _sync(api, people, "sk_auto", before)
        before = people.truth()
        people.change(updates=40, inserts=10, deletes=5)
    m = _sync(api, people, "sk_auto", before)
    expected = m["expected_bytes"]
    # a SQLite source without timestamps: the strategies that cannot run on it expect nothing
    assert expected["row_version"] is None and expected["snapshot_diff"] is None and expected["timestamp"] is None
    assert all(expected[k] is not None for k in ("sketch", "group_hash", "full_ship", "tuple_hash")), expected
    candidates = {k: v for k, v in expected.items() if k in ("sketch", "group_hash", "full_ship") and v is not None}
    assert m["chosen"] == min(candidates, key=candidates.get), m
    assert m["strategy"] == "auto"


def test_small_changes_grow_an_overlay_that_is_folded_into_a_new_base(api, people):
    """A sketch sync writes only the touched tuples (over the previous base); when the
    overlay would pass a quarter of the base the fragment is written whole again. The view,
    its delta and its statistics stay exact through both."""
    api.add_view("sk_layers", VIEW_SQL.format(source="sk"), strategy="sketch")
    _sync(api, people, "sk_layers", {})
    before = people.truth()
    written = []
    for _ in range(3):
        people.change(updates=1_200, inserts=200, deletes=200)
        m = _sync(api, people, "sk_layers", before)
        before = people.truth()
        assert m.get("fallback") is None, m
        written.append((m["fragment_written"], m["overlay_rows"]))
    # 20,000 rows: one round's ~2,800 overlay rows (upserts and removed keys) fit in 5,000,
    # two rounds' ~5,500 do not
    assert [w for w, _ in written] == ["overlay", "whole", "overlay"], written
    assert 2_400 < written[0][1] < 3_200 and written[1][1] == 0, written
    stats = api.http.get("/v1/views/sk_layers/statistics").json()["sites"][0]["update_statistics"]
    # tno counts the load and three syncs for the rows that lived through all of them
    assert stats["tuples"] == len(before) and stats["max_tno"] == 4, stats


def test_the_agent_and_its_readers_hash_without_numba(api, sketch_agent):
    """The kernels come from their ahead-of-time build (deltasieve_protocol/compiled.py): neither
    the agent nor a reader maps numba's modules or its LLVM library (~100 MiB), even after a
    sync that encoded, hashed and folded every row."""
    people, agent = sketch_agent
    api.add_view("sk_lean", VIEW_SQL.format(source="sk"), strategy="sketch")
    _sync(api, people, "sk_lean", {})
    before = people.truth()
    people.change(updates=30, inserts=10, deletes=5)
    m = _sync(api, people, "sk_lean", before)
    assert m["agent_timings"]["hash_s"] > 0 and m["sketch_cells"] > 0, m
    processes = process_tree(agent.proc.pid)
    numba = {pid: numba_files(mapped) for pid, (_, mapped) in processes.items() if numba_files(mapped)}
    assert not numba, numba
    assert any("_compiled_kernels" in path for path in processes[agent.proc.pid][1]), processes[agent.proc.pid]
