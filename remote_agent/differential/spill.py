"""Records spilled to a file of the agent's own and read back in order, for the
external-memory differentials (a file the size of its records; memory for one block)."""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from remote_agent.differential import Record

#: Records pickled together: one write and one read per block.
BLOCK_RECORDS = 4096


class Spill:
    """An append-only file of records, read back once in the order written.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     spill = Spill(Path(d) / "run")
    ...     spill.extend((k, k * k) for k in range(5000))
    ...     spill.close()
    ...     list(spill)[4998:], spill.records
    ([(4998, 24980004), (4999, 24990001)], 5000)
    """

    def __init__(self, path: Path):
        self.path = path
        self.records = 0
        self._file = path.open("wb")
        self._pending: list[Record] = []

    def append(self, record: Record) -> None:
        self._pending.append(record)
        if len(self._pending) >= BLOCK_RECORDS:
            self._flush()

    def extend(self, records: Iterable[Record]) -> None:
        records = iter(records)
        while block := list(islice(records, BLOCK_RECORDS)):
            self._pending.extend(block)
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            pickle.dump(self._pending, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self.records += len(self._pending)
            self._pending = []

    def close(self) -> None:
        """Write what is pending and close the file for writing (the records can then be read)."""
        self._flush()
        self._file.close()

    def __iter__(self) -> Iterator[Record]:
        with self.path.open("rb") as f:
            while True:
                try:
                    yield from pickle.load(f)
                except EOFError:
                    return
