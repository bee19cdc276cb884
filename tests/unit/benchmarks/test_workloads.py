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
