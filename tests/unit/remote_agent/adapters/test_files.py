"""The agent on a directory of dump files: reading, pinning, key checks, the lock, the differential answer."""

from __future__ import annotations

import gzip
import json
import random
from decimal import Decimal
from pathlib import Path

import pytest

from deltasieve_protocol import frames
from deltasieve_protocol.wire import key_values
from remote_agent.adapters import open_adapter
from remote_agent.errors import BadRequest, Gone, SourceDataError
from remote_agent.sitequery import validate_site_query
from remote_agent.strategies.snapshot_diff import snapshot_diff_answer

PEOPLE = {
    "key": ["id"],
    "columns": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "text"},
        {"name": "balance", "type": "decimal(8,2)"},
        {"name": "born", "type": "date"},
    ],
}


def write_people(path: Path, stamp: str, rows: list[tuple], gz: bool = False) -> str:
    text = "id,name,balance,born\n" + "".join(",".join("" if v is None else str(v) for v in row) + "\n" for row in rows)
    name = f"people.{stamp}.csv" + (".gz" if gz else "")
    (path / name).write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return name


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "people.table.json").write_text(json.dumps(PEOPLE))
    return tmp_path


def adapter(folder: Path):
    return open_adapter(f"file://{folder}", statement_timeout_s=10, cache_dir=str(folder.parent / "cache"))


def read_all(a, sql: str) -> list[tuple]:
    with a.session() as session, session.read() as reader:
        return [row for rows in reader.stream(sql) for row in rows]


def test_the_newest_dump_is_read_typed_and_gzipped_or_not(folder):
    write_people(folder, "2026-11-01", [(1, "ann", "1.50", "2001-02-03")])
    write_people(folder, "2026-11-02", [(2, "bob", None, None), (1, "ann", "2.50", "2001-02-03")], gz=True)
    (folder / "people.2026-11-03.csv.part").write_text("id,name,balance,born\n9,half,1,2000-01-01\n")
    a = adapter(folder)
    assert a.dumps_read(["people"]) == {"people": "people.2026-11-02.csv.gz"}
    rows = read_all(a, 'SELECT * FROM "people"')
    assert rows == [(1, "ann", Decimal("2.50"), __import__("datetime").date(2001, 2, 3)), (2, "bob", None, None)]
    old = a.pinned({"people": "people.2026-11-01.csv"})
    assert read_all(old, 'SELECT "id" FROM "people"') == [(1,)]


def test_fixed_width_records_are_trimmed_and_empty_fields_are_null(tmp_path):
    desc = {
        "format": "fixed",
        "key": ["code"],
        "columns": [{"name": "code", "type": "text", "width": 4}, {"name": "qty", "type": "int", "width": 5}],
    }
    (tmp_path / "stock.table.json").write_text(json.dumps(desc))
    (tmp_path / "stock.1.dat").write_text("AB     7\nC       \n")
    assert read_all(adapter(tmp_path), 'SELECT * FROM "stock" ORDER BY 1') == [("AB", 7), ("C", None)]


def test_a_pin_names_an_existing_dump_of_the_table(folder):
    write_people(folder, "1", [(1, "a", "1", None)])
    a = adapter(folder)
    with pytest.raises(Gone, match="no longer"):
        a.pinned({"people": "people.0.csv"})
    with pytest.raises(BadRequest, match="not the name of a dump"):
        a.pinned({"people": "../people.1.csv"})
    with pytest.raises(BadRequest, match="not the name of a dump"):
        a.pinned({"nobody": "nobody.1.csv"})
    db = open_adapter(f"sqlite:///{folder / 'x.db'}", statement_timeout_s=1)
    with pytest.raises(BadRequest, match="not dump files"):
        db.pinned({"people": "people.1.csv"})


@pytest.mark.parametrize(
    "rows, words",
    [([(1, "a", "1", None), (1, "b", "2", None)], "more than once"), ([(None, "a", "1", None)], "NULL in its key")],
)
def test_a_dump_whose_key_is_not_unique_or_null_is_refused(folder, rows, words):
    write_people(folder, "1", rows)
    with pytest.raises(SourceDataError, match=words):
        read_all(adapter(folder), 'SELECT * FROM "people"')


def test_a_bad_description_says_what_is_wrong(folder):
    (folder / "people.table.json").write_text(json.dumps({**PEOPLE, "key": ["nope"]}))
    with pytest.raises(SourceDataError, match="key must list some of the columns"):
        adapter(folder).describe()


def test_a_connection_reads_nothing_but_what_it_needs(folder, tmp_path_factory):
    write_people(folder, "1", [(1, "a", "1", None)])
    secret = tmp_path_factory.mktemp("elsewhere") / "secret.csv"
    secret.write_text("x\n1\n")
    a = adapter(folder)
    for in_file_order in (False, True):
        conn = a.connect(in_file_order=in_file_order)
        try:
            refused = [f"SELECT * FROM read_csv('{secret}')", "SET enable_external_access = true"]
            if not in_file_order:  # over the cache: the dump directory is out of reach
                refused.append(f"COPY people TO '{folder}/x.csv'")
            for sql in refused:
                with pytest.raises(Exception, match="Permission|Cannot change"):
                    conn.execute(sql)
            assert conn.execute("SELECT count(*) FROM people").fetchone() == (1,)
        finally:
            conn.close()
    assert not (folder / "x.csv").exists()


def answer(a, previous: dict, algorithm: str, aging_rows: int = 4) -> tuple[dict, dict, set]:
    tables = {t.name: t for t in a.describe()}
    query = validate_site_query(
        'SELECT "p"."id" AS "id", "p"."name" AS "name", "p"."balance" AS "balance" FROM "people" AS "p" '
        'WHERE "p"."id" < 1000',
        ["id"],
        tables,
        "duckdb",
    )
    rows, gone, summary = {}, set(), {}
    body = snapshot_diff_answer(
        a.pinned(None), query, previous, algorithm=algorithm, block_rows=2, aging_rows=aging_rows, batch_rows=7
    )
    for frame in frames.read_frames(body):
        if frame.kind == frames.SUMMARY:
            summary = frame.json()
        elif frame.kind == frames.CHANGED_ROWS:
            batch = frame.batch()
            rows.update(zip(key_values(batch, ["id"]), batch.to_pylist()))
        elif frame.kind == frames.DELETED_KEYS:
            gone.update(key_values(frame.batch(), ["id"]))
    return summary, rows, gone


@pytest.mark.parametrize("algorithm", ["window", "sort_merge", "partitioned_hash"])
def test_the_differential_answer_holds_every_change(folder, algorithm):
    rng = random.Random(3)
    old = {i: (i, f"n{i}", f"{i}.00", None) for i in range(1, 200)}
    new = {k: v for k, v in old.items() if k % 13}
    for k in rng.sample(sorted(new), 20):
        new[k] = (k, "changed", "1.00", None)
    new.update({i: (i, "fresh", None, None) for i in range(990, 1010)})  # some outside the WHERE
    first = write_people(folder, "1", list(old.values()))
    order = list(new.values())
    for _ in range(10):  # some rows moved far: the small window yields useless pairs
        order.insert(rng.randrange(len(order)), order.pop(rng.randrange(len(order))))
    write_people(folder, "2", order)
    summary, rows, gone = answer(adapter(folder), {"people": first}, algorithm)
    changed = {k for k in new if k < 1000 and (k not in old or new[k] != old[k])}
    deleted = {k for k in old if k not in new}
    assert changed <= set(rows) and deleted <= gone
    extra = (set(rows) - changed) | (gone - deleted)
    if algorithm == "window":  # useless pairs only: a key both shipped and deleted
        assert extra <= set(rows) & gone
    else:
        assert not extra
    assert all(rows[k]["name"] == new[k][1] for k in changed)
    assert summary["dumps"] == {"people": "people.2.csv"} and summary["records_old"] == len(old)


def test_the_same_dump_reads_nothing_and_a_gone_one_is_reported(folder):
    first = write_people(folder, "1", [(1, "a", "1", None)])
    a = adapter(folder)
    summary, rows, gone = answer(a, {"people": first}, "window")
    assert summary["unchanged"] is True and not rows and not gone
    summary, rows, gone = answer(a, {"people": "people.0.csv"}, "window")
    assert "no longer" in summary["previous_gone"] and not rows and not gone
