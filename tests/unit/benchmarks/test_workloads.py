"""The benchmark's workloads change the rows their profiles say."""

from __future__ import annotations

import sqlite3

from workloads.generators import WORKLOADS


def test_churn_50_updates_half_of_the_rows_uniformly_with_students_delete_and_insert_rates(tmp_path):
    churn50, students = WORKLOADS["churn-50"], WORKLOADS["students"]
    assert (churn50.shape, churn50.key_order) == (students.shape, "scattered")
    assert (churn50.profile.update, churn50.profile.volatile_fraction) == (0.50, 0.0)
    assert (churn50.profile.delete, churn50.profile.insert) == (students.profile.delete, students.profile.insert)

    sim = churn50.simulator(tmp_path / "churn50.db")
    sim.create(4000)
    before = dict(sqlite3.connect(sim.path).execute("SELECT student_id, phone || address FROM students").fetchall())
    assert not sim._hot_pool()  # no volatile minority: every row is as likely to change
    change = sim.change()
    assert (len(change.deleted), len(change.inserted)) == (4, 20)
    assert 1990 <= len(change.updated) <= 2000  # 2,000 drawn, minus any the round also deleted
    assert not set(change.updated) & set(change.deleted)
    after = dict(sqlite3.connect(sim.path).execute("SELECT student_id, phone || address FROM students").fetchall())
    assert len(after) == 4000 - 4 + 20 and not set(change.deleted) & after.keys()
    # an update may toggle `active` only, but most rewrite the phone or the address
    assert sum(before[k] != after[k] for k in change.updated) > 0.8 * len(change.updated)


def test_the_stamped_workload_stamps_every_write_and_flags_half_of_the_deletes(tmp_path):
    sim = WORKLOADS["students-stamped"].simulator(tmp_path / "stamped.db")
    sim.create(4000)
    conn = sqlite3.connect(sim.path)
    assert conn.execute("EXPLAIN QUERY PLAN SELECT * FROM students WHERE updated_at >= '2026'").fetchall()[0][3] == (
        "SEARCH students USING INDEX students_updated_at (updated_at>?)"
    )
    (loaded,) = conn.execute("SELECT max(updated_at) FROM students").fetchone()
    change = sim.change()
    rows = {r[0]: r[1:] for r in conn.execute("SELECT student_id, updated_at, is_deleted FROM students")}
    assert (len(change.deleted), len(change.flagged)) == (4, 2) and set(change.flagged) <= set(change.deleted)
    assert all(rows[k][1] == 1 and rows[k][0] > loaded for k in change.flagged)  # kept, flagged, stamped
    assert not set(change.deleted) - set(change.flagged) & rows.keys()  # the others removed
    assert all(rows[k] > (loaded, -1) and rows[k][1] == 0 for k in change.updated + change.inserted)
    unchanged = rows.keys() - set(change.touched())
    assert all(rows[k][0] <= loaded and rows[k][1] == 0 for k in unchanged)
