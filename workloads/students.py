"""The paper's motivating example: a table of students' personal details.

A minority of records (students who move, change phone numbers) is updated again and
again; most records never change after they are created. The simulator plays the legacy
application between syncs: it updates mostly the volatile minority, deletes a few
records and enrols new students.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

FIRST = [
    "Ava",
    "Ben",
    "Chloé",
    "Dmitri",
    "Eun-ji",
    "Farah",
    "Gustav",
    "Hana",
    "Ilya",
    "Jun",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sipho",
    "Tomás",
    "Uma",
    "Vikram",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoë",
]
LAST = [
    "Anderson",
    "Bianchi",
    "Chen",
    "Dubois",
    "Eriksson",
    "Fernández",
    "García",
    "Hoang",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "Lefèvre",
    "Müller",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quispe",
    "Rossi",
    "Singh",
    "Tanaka",
    "Újvári",
    "Virtanen",
    "Wójcik",
    "Xu",
    "Yilmaz",
    "Zhang",
]
COUNTRIES = [
    "Australia",
    "China",
    "India",
    "Malaysia",
    "Vietnam",
    "Indonesia",
    "Nepal",
    "Brazil",
    "Germany",
    "Kenya",
    "Canada",
    "Japan",
]
STREETS = [
    "Northfields Ave",
    "Crown St",
    "Keira St",
    "Market St",
    "Corrimal St",
    "Smith St",
    "Burelli St",
    "Flinders St",
]
TITLES = ["Mr", "Ms", "Mx", "Dr", None]

SCHEMA = """
CREATE TABLE students (
    student_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    middle_name TEXT,
    last_name TEXT NOT NULL,
    title TEXT,
    birth_date DATE,
    country TEXT,
    phone TEXT,
    address TEXT,
    mailing_address TEXT,
    enrolled DATE,
    gpa DECIMAL(4,2),
    active BOOLEAN NOT NULL
)
"""
COLUMNS = [
    "student_id",
    "first_name",
    "middle_name",
    "last_name",
    "title",
    "birth_date",
    "country",
    "phone",
    "address",
    "mailing_address",
    "enrolled",
    "gpa",
    "active",
]


def _address(rng: random.Random) -> str:
    return f"{rng.randint(1, 400)} {rng.choice(STREETS)}, Wollongong NSW {rng.randint(2500, 2530)}"


def make_student(rng: random.Random, student_id: int) -> tuple:
    birth = dt.date(1990, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 15))
    enrolled = dt.date(2015, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 10))
    address = _address(rng)
    return (
        student_id,
        rng.choice(FIRST),
        rng.choice(FIRST) if rng.random() < 0.4 else None,
        rng.choice(LAST),
        rng.choice(TITLES),
        birth.isoformat(),
        rng.choice(COUNTRIES),
        f"+61 4{rng.randint(10, 99)} {rng.randint(100, 999)} {rng.randint(100, 999)}",
        address,
        address if rng.random() < 0.7 else _address(rng),
        enrolled.isoformat(),
        round(rng.uniform(1.0, 7.0), 2),
        1 if rng.random() < 0.95 else 0,
    )


@dataclass
class ChangeRates:
    """Per round, as fractions of the current row count."""

    update: float = 0.01
    delete: float = 0.001
    insert: float = 0.005
    volatile_fraction: float = 0.10  # share of rows that are volatile
    volatile_share: float = 0.90  # share of updates that hit a volatile row


@dataclass
class StudentsSource:
    """A SQLite 'legacy' database of students and the application that changes it."""

    path: Path
    seed: int = 7
    rates: ChangeRates = field(default_factory=ChangeRates)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.next_id = 1
        self.volatile: set[int] = set()
        self.ids: list[int] = []

    def create(self, rows: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self.path.unlink()
        with sqlite3.connect(self.path) as conn:
            conn.execute(SCHEMA)
            batch = []
            for _ in range(rows):
                batch.append(make_student(self.rng, self._new_id()))
                if len(batch) >= 10_000:
                    conn.executemany(f"INSERT INTO students VALUES ({','.join('?' * len(COLUMNS))})", batch)
                    batch = []
            conn.executemany(f"INSERT INTO students VALUES ({','.join('?' * len(COLUMNS))})", batch)
        self.volatile = {i for i in self.ids if self.rng.random() < self.rates.volatile_fraction}

    def _new_id(self) -> int:
        # Ids are scattered across the key space, as surrogate keys of merged systems often are.
        sid = self.next_id * 7919 % 1_000_003 + 1_000_003 * (self.next_id // 1_000_003)
        self.next_id += 1
        self.ids.append(sid)
        return sid

    def change(self) -> dict:
        """One round of the legacy application's work; returns what it did."""
        rng, rates = self.rng, self.rates
        alive = self.ids
        n = len(alive)
        n_upd, n_del, n_ins = round(n * rates.update), round(n * rates.delete), round(n * rates.insert)
        volatile = list(self.volatile)
        stable = alive
        updated = set()
        for _ in range(n_upd):
            pool = volatile if volatile and rng.random() < rates.volatile_share else stable
            updated.add(rng.choice(pool))
        deleted = set(rng.sample(alive, min(n_del, n)))
        updated -= deleted
        with sqlite3.connect(self.path) as conn:
            for sid in updated:
                what = rng.random()
                if what < 0.5:
                    addr = _address(rng)
                    conn.execute(
                        "UPDATE students SET address = ?, mailing_address = ? WHERE student_id = ?", (addr, addr, sid)
                    )
                elif what < 0.9:
                    conn.execute(
                        "UPDATE students SET phone = ? WHERE student_id = ?",
                        (f"+61 4{rng.randint(10, 99)} {rng.randint(100, 999)} {rng.randint(100, 999)}", sid),
                    )
                else:
                    conn.execute(
                        "UPDATE students SET active = 1 - active, gpa = ? WHERE student_id = ?",
                        (round(rng.uniform(1.0, 7.0), 2), sid),
                    )
            conn.executemany("DELETE FROM students WHERE student_id = ?", [(sid,) for sid in deleted])
            new = [make_student(rng, self._new_id()) for _ in range(n_ins)]
            conn.executemany(f"INSERT INTO students VALUES ({','.join('?' * len(COLUMNS))})", new)
        dead = deleted
        self.ids = [i for i in self.ids if i not in dead]
        self.volatile -= dead
        for row in new:
            if rng.random() < rates.volatile_fraction:
                self.volatile.add(row[0])
        return {"updated": len(updated), "deleted": len(deleted), "inserted": len(new)}


COURSES = ["CSCI235", "CSCI317", "MATH221", "STAT231", "ISIT312", "CSIT314", "ENGG100", "LAW101"]
TERMS = ["2024-S1", "2024-S2", "2025-S1", "2025-S2", "2026-S1"]
GRADES = ["HD", "D", "C", "P", "F", None]


@dataclass
class EnrolmentsSource:
    """A second legacy system: the registry's enrolments, keyed by (student, course, term)."""

    path: Path
    students: StudentsSource
    seed: int = 8

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def create(self, per_student: float = 1.5) -> None:
        if self.path.exists():
            self.path.unlink()
        with sqlite3.connect(self.path) as conn:
            conn.execute(
                "CREATE TABLE enrolments (student_id INTEGER NOT NULL, course TEXT NOT NULL, term TEXT NOT NULL, grade TEXT, PRIMARY KEY (student_id, course, term))"
            )
            rows = [
                self._row(sid) for sid in self.students.ids for _ in range(self.rng.randint(0, round(per_student * 2)))
            ]
            conn.executemany("INSERT OR IGNORE INTO enrolments VALUES (?, ?, ?, ?)", rows)

    def _row(self, sid: int) -> tuple:
        return (sid, self.rng.choice(COURSES), self.rng.choice(TERMS), self.rng.choice(GRADES))

    def change(self) -> dict:
        """Grades come out, students enrol (new students too) and withdraw."""
        rng = self.rng
        with sqlite3.connect(self.path) as conn:
            keys = conn.execute("SELECT student_id, course, term FROM enrolments").fetchall()
            graded = rng.sample(keys, min(len(keys), len(keys) // 100))
            conn.executemany(
                "UPDATE enrolments SET grade = ? WHERE student_id = ? AND course = ? AND term = ?",
                [(rng.choice(GRADES), *k) for k in graded],
            )
            withdrawn = rng.sample(keys, min(len(keys), len(keys) // 500))
            conn.executemany("DELETE FROM enrolments WHERE student_id = ? AND course = ? AND term = ?", withdrawn)
            ids = self.students.ids
            new = [self._row(rng.choice(ids[-500:] if rng.random() < 0.5 else ids)) for _ in range(len(keys) // 200)]
            conn.executemany("INSERT OR IGNORE INTO enrolments VALUES (?, ?, ?, ?)", new)
        return {"graded": len(graded), "withdrawn": len(withdrawn), "enrolled": len(new)}
