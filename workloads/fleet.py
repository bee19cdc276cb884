"""Many sources for one service: SQLite files of small tables, one agent process each, every
source mirrored with a schedule; and what the service says it holds (threads, open files,
TCP connections, memory) as its /metrics shows it. Used by the many-sources benchmark
(tests/benchmarks/many_sources.py) and its integration test."""

from __future__ import annotations

import random
import secrets
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workloads.harness import Api, Process, start_agent

#: The /metrics series a reading takes, by the name a reading gives it.
FIGURES = {
    "threads": "deltasieve_process_threads",
    "open_files": "deltasieve_process_open_files",
    "rss_bytes": "deltasieve_process_resident_memory_bytes",
    "tree_rss_bytes": "deltasieve_process_tree_resident_memory_bytes",
    "running": "deltasieve_syncs_running",
    "queued": "deltasieve_syncs_queued",
}
#: Agents started at once: each spends a second or two of CPU importing before it answers.
STARTING_AT_ONCE = 4


def make_source(path: Path, tables: int, rows: int, seed: int = 0) -> list[str]:
    """A SQLite file of `tables` tables t00, t01, ... of `rows` rows each (integer key, a
    name, a quantity); their names."""
    rng = random.Random(seed)
    names = [f"t{i:02d}" for i in range(tables)]
    with sqlite3.connect(path) as db:
        for name in names:
            db.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT NULL)")
            db.executemany(
                f"INSERT INTO {name} VALUES (?, ?, ?)", ((i, f"n{i}", rng.randrange(1000)) for i in range(rows))
            )
    return names


def touch(path: Path, table: str, changed: int, rng: random.Random) -> None:
    """Change `changed` rows of one table of a source at random (their quantity)."""
    with sqlite3.connect(path) as db:
        rows = db.execute(f"SELECT max(id) FROM {table}").fetchone()[0] or 0
        db.executemany(
            f"UPDATE {table} SET qty = qty + 1 WHERE id = ?", ((rng.randrange(rows + 1),) for _ in range(changed))
        )


@dataclass
class Fleet:
    """`count` sources of `tables` tables each, one agent process each, in `work_dir`."""

    work_dir: Path
    count: int
    tables: int
    rows: int
    agents: list[Process] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)

    def start(self) -> None:
        """Write every source's file and start its agent (a few at a time)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.count):
            path = self.work_dir / f"src{i:03d}.db"
            path.unlink(missing_ok=True)
            make_source(path, self.tables, self.rows, seed=i)
            self.files.append(path)
            self.tokens.append(secrets.token_hex(16))
        with ThreadPoolExecutor(STARTING_AT_ONCE) as pool:
            self.agents = list(
                pool.map(
                    lambda i: start_agent(f"sqlite:///{self.files[i]}", self.work_dir, token=self.tokens[i]),
                    range(self.count),
                )
            )

    def name(self, i: int) -> str:
        return f"fleet{i:03d}"

    def add(self, api: Api, i: int, every_s: int | None) -> list[str]:
        """Register source `i` and mirror it (each table a view, scheduled every `every_s`); its views."""
        api.add_source(self.name(i), self.agents[i].url, self.tokens[i])
        body = {"schedule": {"every_s": every_s}} if every_s else {}
        r = api.http.post(f"/v1/sources/{self.name(i)}/mirror", json=body)
        r.raise_for_status()
        return [m["view"] for m in r.json()["created"]]

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()


def metrics(api: Api) -> dict[str, float]:
    """The service's /metrics: series name with its labels as written -> value."""
    r = api.http.get("/metrics")
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def reading(api: Api) -> dict:
    """What the service holds now and the syncs it has finished, from its /metrics."""
    seen = metrics(api)
    out = {figure: seen.get(series) for figure, series in FIGURES.items()}
    out["connections_accepted"] = seen.get('deltasieve_process_tcp_connections{direction="accepted"}')
    out["connections_opened"] = seen.get('deltasieve_process_tcp_connections{direction="opened"}')
    for status in ("succeeded", "failed"):
        out[f"syncs_{status}"] = sum(
            v for k, v in seen.items() if k.startswith("deltasieve_syncs_total{") and f'status="{status}"' in k
        )
    return {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in out.items()}
