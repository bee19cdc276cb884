"""A data directory written by deltasieve 41bc7ec (state format 1) keeps working with this code.

The fixture (tests/fixtures/datadir-41bc7ec/, made by make_datadir_41bc7ec.py) holds the old
service's catalog and views/ tree after two syncs of a one-site view and a two-source join
view, the SQLite sources they were synced from, and what the old service answered then.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.oracle import check_sync, keyed
from warehouse.formats import STORAGE_FORMAT
from workloads.harness import Api, start_agent, start_service

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "datadir-41bc7ec"
ANSWERS = json.loads((FIXTURE / "answers.json").read_text())
#: view -> (key, the truth's SQL over crm.db with hr.db attached as "hr").
VIEWS = {
    "people_v": (["id"], "SELECT id, name, city, score FROM people WHERE score > 10"),
    "staff_v": (
        ["id", "staff_id"],
        "SELECT p.id, p.name, s.id AS staff_id, s.team FROM people p JOIN hr.staff s ON s.person_id = p.id",
    ),
}


class Upgraded:
    """A copy of the fixture served by the current agents and service."""

    def __init__(self, work: Path, logs: Path):
        self.sources = work / "sources"
        self.data = work / "data"
        shutil.copytree(FIXTURE / "sources", self.sources)
        self.data.mkdir()
        shutil.copy(FIXTURE / "catalog.db", self.data / "catalog.db")
        shutil.copytree(FIXTURE / "views", self.data / "views")
        self.agents = {name: start_agent(f"sqlite:///{self.sources / f'{name}.db'}", logs) for name in ("crm", "hr")}
        # The catalog holds the agent URLs of the run that made the fixture, and the API has no
        # way to change a source's URL: point the sources at the new agents in the copied file.
        with closing(sqlite3.connect(self.data / "catalog.db")) as c, c:
            c.executemany(
                "UPDATE sources SET url = ? WHERE name = ?", [(agent.url, name) for name, agent in self.agents.items()]
            )
        # the fixture's syncs are older than the default retention (30 days): keep them all, so
        # that every answer can be compared with the one recorded when the fixture was made
        self.service = start_service(self.data, logs, env={"SERVICE_KEEP_DELTAS": "1000000"})
        self.api = Api(self.service.url)

    def truth(self, view: str) -> dict:
        key, sql = VIEWS[view]
        with closing(sqlite3.connect(self.sources / "crm.db")) as c:
            c.execute("ATTACH DATABASE ? AS hr", (str(self.sources / "hr.db"),))
            cursor = c.execute(sql)
            names = [d[0] for d in cursor.description]
            return keyed((dict(zip(names, row)) for row in cursor), key)

    def stored(self, path: str) -> dict:
        return json.loads((self.data / "views" / path).read_text())

    def definition(self, view: str) -> dict:
        with closing(sqlite3.connect(f"file:{self.data / 'catalog.db'}?mode=ro", uri=True)) as c:
            return json.loads(c.execute("SELECT definition FROM views WHERE name = ?", (view,)).fetchone()[0])

    def close(self) -> None:
        self.api.close()
        self.service.stop()
        for agent in self.agents.values():
            agent.stop()


@pytest.fixture(scope="module")
def old(tmp_path_factory, logs_dir):
    upgraded = Upgraded(tmp_path_factory.mktemp("upgrade"), logs_dir)
    yield upgraded
    upgraded.close()


def test_the_fixture_is_format_1():
    for view in VIEWS:
        assert "format" not in json.loads((FIXTURE / "views" / view / "CURRENT").read_text())
        assert "format" not in json.loads((FIXTURE / "views" / view / "versions" / "2" / "meta.json").read_text())
    with closing(sqlite3.connect(f"file:{FIXTURE / 'catalog.db'}?immutable=1", uri=True)) as c:
        assert all("format" not in json.loads(d) for (d,) in c.execute("SELECT definition FROM views"))


@pytest.mark.parametrize("view", VIEWS)
def test_stored_rows_are_served_as_before(old, view):
    key, _ = VIEWS[view]
    rows = keyed(old.api.rows(view), key)
    assert rows == keyed(ANSWERS["rows"][view], key) == old.truth(view)


@pytest.mark.parametrize("view", VIEWS)
def test_statistics_answer_as_before(old, view):
    r = old.api.http.get(f"/v1/views/{view}/statistics")
    assert r.status_code == 200, r.text
    got, want = r.json(), ANSWERS["statistics"][view]
    # the histogram of update probabilities changed on purpose since the fixture was made (never
    # updated tuples are counted apart): it holds every tuple once; the rest is as it was
    for site in got["sites"]:
        histogram = site["update_statistics"].pop("update_probability_histogram")
        assert sum(histogram["counts"]) + histogram["never_updated"] == site["update_statistics"]["tuples"]
    for site in want["sites"]:
        site["update_statistics"].pop("update_probability_histogram")
    assert got == want


@pytest.mark.parametrize("view", VIEWS)
def test_definitions_are_rewritten_in_format_2_at_start(old, view):
    definition = old.definition(view)
    assert definition["format"] == 2
    assert old.api.http.get(f"/v1/views/{view}").status_code == 200


def test_a_sync_after_a_change_is_exact_and_stores_the_current_format(old):
    before = {view: old.truth(view) for view in VIEWS}
    with closing(sqlite3.connect(old.sources / "crm.db")) as c, c:
        c.execute("UPDATE people SET name = 'renamed 6', score = 30 WHERE id = 6")
        c.execute("DELETE FROM people WHERE id IN (12, 13)")
        c.execute("INSERT INTO people VALUES (40, 'person 40', 'Lima', 25)")
    with closing(sqlite3.connect(old.sources / "hr.db")) as c, c:
        c.execute("UPDATE staff SET team = 'ops' WHERE id = 105")
        c.execute("INSERT INTO staff VALUES (140, 40, 'dev')")
    for view, (key, _) in VIEWS.items():
        sync = old.api.sync(view)
        check_sync(old.api, view, key, before[view], old.truth(view), sync)
        current = old.stored(f"{view}/CURRENT")
        assert current["format"] == STORAGE_FORMAT and current["version"] == 3 and current["sync_id"] == sync["id"]
        assert old.stored(f"{view}/versions/3/meta.json")["format"] == STORAGE_FORMAT
        assert "format" not in old.stored(f"{view}/versions/2/meta.json")  # the kept old version, as written
