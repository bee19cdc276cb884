"""PostgreSQL snapshots as the row_version strategy keeps and compares them (pure logic).

PostgreSQL writes into every row version the id of the transaction that wrote it (the
system column `xmin`, 32 bits, wrapping around), and `pg_current_snapshot()` tells which
transactions a reader sees: all ids below `xmin` have ended, none at or above `xmax` had
started, and `xip` lists the ones in between still running. The snapshot's ids are 64-bit
(`xid8`: the epoch, i.e. the count of wraparounds, above the 32-bit id), so they only grow.

**Which rows the next sync reads.** The agent takes a snapshot S before the first chunk
of a sync's read; the next sync reads the rows whose xmin is at or after S.xmin (and before
its own current xmax). Why S.xmin and not "not visible in S": every transaction with an id
below S.xmin had finished when S was taken, so all it wrote was there for each chunk of that
sync to read; anything newer is re-read. A test of visibility in S (id ≥ S.xmax, or listed
in S.xip) would be tighter, but S.xip names top-level transactions only: a row written inside
a savepoint of a transaction that was running at S carries the subtransaction's own id,
which lies between S.xmin and S.xmax without being listed, so the visibility test would
take it as seen and lose it once its parent commits. A subtransaction's id is always above
its parent's, which is at least S.xmin: the bound S.xmin catches it. The cost is re-reading
the rows of transactions that ended between S.xmin and S.xmax; the exact delta drops them.

**When the comparison is not valid** the strategy reconciles in full instead and says why
(`fallback_reason`): no previous snapshot; another server (its `system_identifier` differs:
a restore into a new cluster, a failover to another one); the counter went back (the current
xmax below the previous one: a restored database, a replica that lags); a standby that has
not replayed all the previous snapshot saw; or so many transactions since the previous xmin
that the 32-bit distance of a row's xmin no longer says on which side it lies (`MAX_SPAN`).

**Replicas.** A hot standby of the same cluster has the same identity and its primary's
transaction ids, so a snapshot taken on one serves a sync from the other, provided the
server read now has everything the previous snapshot saw. The counter does not tell: a
standby whose replay stopped after the commit of transaction 101 and before that of 100
has the same xmax (102) as the primary's snapshot that saw both, yet 100's rows are not
there, and their older versions, with an xmin below the previous one, would not be read.
The WAL position does: every snapshot keeps `wal_lsn`, read after it was taken (a primary's
insert position, the end of what a standby received), which lies at or after the commit record of
every transaction it saw; a snapshot taken on a standby keeps `replayed_lsn` too, read
before it was taken. A standby whose `replayed_lsn` lies below the previous `wal_lsn` may
miss some of what the previous snapshot saw: the sync reconciles in full. (The xip of a
standby's `pg_current_snapshot()` is empty: PostgreSQL 15 keeps a standby's running
transactions elsewhere. Only the xmin is used, which is right on a standby.)
"""

from __future__ import annotations

from dataclasses import dataclass

#: Transactions allowed between the previous snapshot's xmin and the current xmax: the
#: agent compares 32-bit distances, which stay unambiguous below 2^31; the margin (2^24,
#: 16 million transactions) covers the ones that start while the sync reads.
MAX_SPAN = 2**31 - 2**24


@dataclass(frozen=True)
class Snapshot:
    """A snapshot's bounds as 64-bit transaction ids, the server that took it, and its WAL positions.

    `wal_lsn`: at or after the commit record of every transaction the snapshot saw (None
    where the agent could not read it);
    `replayed_lsn`: on a standby, what it had replayed before the snapshot was taken (None
    on a primary). Both are byte positions in the WAL (`pg_lsn` - '0/0').
    """

    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()
    system_identifier: str | None = None
    wal_lsn: int | None = None
    replayed_lsn: int | None = None

    def to_json(self) -> dict:
        return {
            "xmin": self.xmin,
            "xmax": self.xmax,
            "xip": list(self.xip),
            "system_identifier": self.system_identifier,
            "wal_lsn": self.wal_lsn,
            "replayed_lsn": self.replayed_lsn,
        }

    @classmethod
    def from_json(cls, data: dict) -> Snapshot:
        """A snapshot as the agent reports it (`source_snapshot`) or the state file keeps it.

        >>> Snapshot.from_json({"xmin": 740, "xmax": 742, "xip": [740], "system_identifier": "7"})
        Snapshot(xmin=740, xmax=742, xip=(740,), system_identifier='7', wal_lsn=None, replayed_lsn=None)
        >>> Snapshot.from_json({"xmin": 9, "xmax": 8})
        Traceback (most recent call last):
        ...
        ValueError: a snapshot's xmin (9) lies above its xmax (8)
        """
        snap = cls(
            int(data["xmin"]),
            int(data["xmax"]),
            tuple(int(x) for x in data.get("xip") or ()),
            data.get("system_identifier"),
            _optional_int(data.get("wal_lsn")),
            _optional_int(data.get("replayed_lsn")),
        )
        if snap.xmin > snap.xmax:
            raise ValueError(f"a snapshot's xmin ({snap.xmin}) lies above its xmax ({snap.xmax})")
        return snap


def _optional_int(value) -> int | None:
    return None if value is None else int(value)


def lsn_text(lsn: int) -> str:
    """A WAL position as PostgreSQL writes a `pg_lsn`.

    >>> lsn_text(0x3001EE0), lsn_text(2**32 + 16)
    ('0/3001EE0', '1/10')
    """
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def epoch_and_xid(xid8: int) -> tuple[int, int]:
    """An xid8 split into its epoch (wraparounds so far) and the 32-bit id a row carries.

    >>> epoch_and_xid(2**32 + 5)
    (1, 5)
    """
    return divmod(xid8, 2**32)


def fallback_reason(previous: Snapshot | None, current: Snapshot) -> str | None:
    """Why the rows written since `previous` cannot be found by comparing xmins; None: they can.

    >>> s = Snapshot(1000, 1005, (1000,), "7")
    >>> fallback_reason(s, Snapshot(1200, 1201, (), "7")) is None
    True
    >>> fallback_reason(None, s)
    'no previous snapshot'
    >>> fallback_reason(s, Snapshot(1200, 1201, (), "8"))
    'another server (system identifier 8, was 7): a restored or different cluster'
    >>> fallback_reason(s, Snapshot(700, 701, (), "7"))
    'the transaction counter went back (xmax 701, was 1005): a restored database or a lagging replica'
    >>> fallback_reason(s, Snapshot(1000 + 2**31, 1000 + 2**31, (), "7"))
    '2147483648 transactions since the previous snapshot: more than 32-bit xids can compare (2130706432)'
    >>> seen = Snapshot(1002, 1002, (), "7", wal_lsn=0x3000400)  # on the primary: saw 1000 and 1001 commit
    >>> fallback_reason(seen, Snapshot(1000, 1002, (), "7", wal_lsn=0x3000300, replayed_lsn=0x3000300))
    'the standby has not replayed all the previous snapshot saw (replayed up to 0/3000300, that snapshot needs 0/3000400): a lagging replica'
    >>> fallback_reason(seen, Snapshot(1002, 1002, (), "7", wal_lsn=0x3000480, replayed_lsn=0x3000400)) is None
    True
    """
    if previous is None:
        return "no previous snapshot"
    if (
        previous.system_identifier is not None
        and current.system_identifier is not None
        and previous.system_identifier != current.system_identifier
    ):
        return (
            f"another server (system identifier {current.system_identifier}, was {previous.system_identifier}): "
            "a restored or different cluster"
        )
    if current.xmax < previous.xmax:
        return (
            f"the transaction counter went back (xmax {current.xmax}, was {previous.xmax}): "
            "a restored database or a lagging replica"
        )
    if current.replayed_lsn is not None and previous.wal_lsn is not None and current.replayed_lsn < previous.wal_lsn:
        return (
            f"the standby has not replayed all the previous snapshot saw (replayed up to "
            f"{lsn_text(current.replayed_lsn)}, that snapshot needs {lsn_text(previous.wal_lsn)}): a lagging replica"
        )
    span = current.xmax - previous.xmin
    if span > MAX_SPAN:
        return f"{span} transactions since the previous snapshot: more than 32-bit xids can compare ({MAX_SPAN})"
    return None
