"""Versioned row state for ordered transforms, in one SQLite file per transform.

Every row image a transform keeps is stored with the ``seq`` of the change that made
it: ``(table, key, seq) -> image`` (None for a delete). A lookup asks for a row *as it
was just before* a given seq: the newest version below it. So state answers the same
for a micro-batch replayed after a crash as it did the first time, whatever the failed
attempt already wrote (its versions sort after the seqs that ask about them, or equal
the replay's own). A TRUNCATE is a version under a reserved key that hides every
older row of its table.

Old versions are pruned: Spark replays only the last uncommitted micro-batch, so when
batch N starts no lookup will ever ask below the first seq of batch N. The store keeps
more than that (a checkpoint rolled back by hand a few batches still replays exactly):
of the keys touched before batch N - KEEP_BATCHES, every version older than the newest
one below the first seq of batch N - KEEP_BATCHES is deleted.

The file lives in the sink's checkpoint folder (``<checkpoint>/<i>-<sink>/transforms/``),
which the ordered stage's single task must see (local, or a shared mount on a cluster).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable

__all__ = ["VersionStore", "TRUNCATED", "seq_text"]

TRUNCATED = "\x00truncate"
KEEP_BATCHES = 100
_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    tbl TEXT NOT NULL, k TEXT NOT NULL, seq TEXT NOT NULL, image TEXT,
    PRIMARY KEY (tbl, k, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS touched (
    batch_id INTEGER NOT NULL, tbl TEXT NOT NULL, k TEXT NOT NULL,
    PRIMARY KEY (batch_id, tbl, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (batch_id INTEGER PRIMARY KEY, first_seq TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot_reads (
    tbl TEXT NOT NULL, k TEXT NOT NULL, seq TEXT NOT NULL,
    PRIMARY KEY (tbl, k, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (
    tbl TEXT NOT NULL, j INTEGER NOT NULL, v TEXT NOT NULL, k TEXT NOT NULL, seq TEXT NOT NULL,
    PRIMARY KEY (tbl, j, v, k, seq)) WITHOUT ROWID;
"""


def seq_text(seq: int) -> str:
    """A seq as fixed-width text, so text order is numeric order."""
    return f"{seq:040d}"


class VersionStore:
    """``put``/``get`` of row versions by seq; one transaction per micro-batch."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self.batch_id = -1

    def begin(self, batch_id: int, first_seq: int | None) -> None:
        """Start a micro-batch: prune what the committed batches made unreachable."""
        self.batch_id = batch_id
        self.db.execute("BEGIN")
        if first_seq is not None:
            self.db.execute("INSERT OR REPLACE INTO batches VALUES (?, ?)",
                            (batch_id, seq_text(first_seq)))
        horizon = self.db.execute(
            "SELECT batch_id, first_seq FROM batches WHERE batch_id <= ? ORDER BY batch_id DESC "
            "LIMIT 1", (batch_id - KEEP_BATCHES,)).fetchone()
        if horizon is not None:
            self._prune(horizon[0], horizon[1])
            self.db.execute("DELETE FROM batches WHERE batch_id < ?", (horizon[0],))

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def close(self) -> None:
        self.rollback()
        self.db.close()

    # --- rows ---------------------------------------------------------------------

    def put(self, table: str, key: str, seq: int, image: str | None,
            snapshot: bool = False) -> None:
        """A version of the row; ``snapshot``: a snapshot's read (its seq is the read's
        high watermark, later than the stream's changes made while the snapshot ran)."""
        self.db.execute("INSERT OR REPLACE INTO versions VALUES (?, ?, ?, ?)",
                        (table, key, seq_text(seq), image))
        if snapshot:
            self.db.execute("INSERT OR IGNORE INTO snapshot_reads VALUES (?, ?, ?)",
                            (table, key, seq_text(seq)))
        self.db.execute("INSERT OR IGNORE INTO touched VALUES (?, ?, ?)",
                        (self.batch_id, table, key))

    def truncate(self, table: str, seq: int) -> None:
        self.put(table, TRUNCATED, seq, None)

    def get(self, table: str, key: str, below: int) -> str | None:
        """The image of ``table``'s row ``key`` just before ``below`` (None: no such row)."""
        return self.known(table, key, below)[1]

    def known(self, table: str, key: str, below: int) -> tuple[bool, str | None]:
        """Whether anything is known of the row just before ``below`` (a version, a delete
        or a truncate), and its image there (None: no such row)."""
        s = seq_text(below)
        found = self.db.execute(
            "SELECT seq, image FROM versions WHERE tbl = ? AND k = ? AND seq < ? "
            "ORDER BY seq DESC LIMIT 1", (table, key, s)).fetchone()
        cut = self.db.execute(
            "SELECT seq FROM versions WHERE tbl = ? AND k = ? AND seq < ? "
            "ORDER BY seq DESC LIMIT 1", (table, TRUNCATED, s)).fetchone()
        if found is None:
            return cut is not None, None
        if cut is not None and cut[0] > found[0]:
            return True, None
        return True, found[1]

    def read_after(self, table: str, key: str, above: int) -> tuple[int, str | None] | None:
        """The first snapshot read of the row after ``above`` (its seq and image), or None.
        A lookup that finds no version below a seq but this: the row was read by a snapshot
        that finished after the change asking (the stream's changes made while it ran come
        after its reads)."""
        found = self.db.execute(
            "SELECT v.seq, v.image FROM snapshot_reads r JOIN versions v "
            "ON v.tbl = r.tbl AND v.k = r.k AND v.seq = r.seq "
            "WHERE r.tbl = ? AND r.k = ? AND r.seq > ? ORDER BY r.seq LIMIT 1",
            (table, key, seq_text(above))).fetchone()
        return None if found is None else (int(found[0]), found[1])

    # --- references (for re-emitting rows that point at a changed row) -------------

    def put_refs(self, table: str, key: str, seq: int, values: Iterable[tuple[int, str]]) -> None:
        for j, v in values:
            self.db.execute("INSERT OR REPLACE INTO refs VALUES (?, ?, ?, ?, ?)",
                            (table, j, v, key, seq_text(seq)))

    def pointing_at(self, table: str, j: int, value: str, below: int) -> list[str]:
        """Keys of ``table`` rows whose version just before ``below`` has reference ``j``
        equal to ``value`` (checked against the row's newest version there)."""
        s = seq_text(below)
        candidates = [k for (k,) in self.db.execute(
            "SELECT DISTINCT k FROM refs WHERE tbl = ? AND j = ? AND v = ? AND seq < ?",
            (table, j, value, s))]
        out = []
        for k in candidates:
            newest = self.db.execute(
                "SELECT seq FROM versions WHERE tbl = ? AND k = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT 1", (table, k, s)).fetchone()
            hit = newest and self.db.execute(
                "SELECT 1 FROM refs WHERE tbl = ? AND j = ? AND v = ? AND k = ? AND seq = ?",
                (table, j, value, k, newest[0])).fetchone()
            if hit and self.get(table, k, below) is not None:
                out.append(k)
        return sorted(out)

    # --- pruning --------------------------------------------------------------------

    def _prune(self, batch_id: int, first: str) -> None:
        keys = self.db.execute("SELECT DISTINCT tbl, k FROM touched WHERE batch_id < ?",
                               (batch_id,)).fetchall()
        for tbl, k in keys:
            newest = self.db.execute(
                "SELECT seq FROM versions WHERE tbl = ? AND k = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT 1", (tbl, k, first)).fetchone()
            if newest is not None:
                self.db.execute("DELETE FROM versions WHERE tbl = ? AND k = ? AND seq < ?",
                                (tbl, k, newest[0]))
                self.db.execute("DELETE FROM refs WHERE tbl = ? AND k = ? AND seq < ?",
                                (tbl, k, newest[0]))
                self.db.execute("DELETE FROM snapshot_reads WHERE tbl = ? AND k = ? AND seq < ?",
                                (tbl, k, newest[0]))
        self.db.execute("DELETE FROM touched WHERE batch_id < ?", (batch_id,))

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM versions").fetchone()[0]
