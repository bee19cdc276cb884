"""A small legacy SQLite table for the failure tests: seeded changes and the truth."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

VIEW_SQL = "SELECT p.id, p.name, p.city, p.score FROM {source}.people p WHERE p.score >= 0"
KEY = ["id"]
CITIES = ["Oslo", "Łódź", "São Paulo", "東京", "Zürich", "Nairobi", None]


class People:
    def __init__(self, path: Path, rows: int = 20_000, seed: int = 1):
        self.path = Path(path)
        self.rng = random.Random(seed)
        self.next_id = rows
        with self._connect() as c:
            c.execute(
                "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, score INTEGER NOT NULL)"
            )
            c.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", [self._row(i) for i in range(rows)])

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path)

    def _row(self, i: int) -> tuple:
        return (i, f"person {i} {self.rng.random():.6f}", self.rng.choice(CITIES), self.rng.randrange(-5, 1000))

    def change(self, updates: int = 150, inserts: int = 60, deletes: int = 20) -> None:
        with self._connect() as c:
            ids = [r[0] for r in c.execute("SELECT id FROM people")]
            for i in self.rng.sample(ids, min(updates, len(ids))):
                c.execute("UPDATE people SET name = ?, city = ?, score = ? WHERE id = ?", self._row(i)[1:] + (i,))
            for i in self.rng.sample(ids, min(deletes, len(ids))):
                c.execute("DELETE FROM people WHERE id = ?", (i,))
            for _ in range(inserts):
                c.execute("INSERT INTO people VALUES (?, ?, ?, ?)", self._row(self.next_id))
                self.next_id += 1

    def update_one(self, i: int, name: str) -> None:
        with self._connect() as c:
            c.execute("UPDATE people SET name = ? WHERE id = ?", (name, i))

    def truth(self) -> dict:
        """The view evaluated on the source, keyed as `oracle.keyed` keys the service's rows."""
        with self._connect() as c:
            rows = c.execute("SELECT id, name, city, score FROM people WHERE score >= 0").fetchall()
        return {(r[0],): {"id": r[0], "name": r[1], "city": r[2], "score": r[3]} for r in rows}
