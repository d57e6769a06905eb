"""The Parquet changelog's commit: Spark's file-sink metadata log, written by the sink.

A Parquet changelog is a folder of part files plus ``_spark_metadata/``, the log Spark's
own file sink keeps: entry ``N`` lists the files micro-batch ``N`` added, one JSON line
each after a ``v1`` version line; every ``compact_interval``-th entry (``N.compact``,
where ``(N + 1) % interval == 0``) lists every file still live up to ``N``. Spark reading
the folder (``spark.read.parquet``) reads only the files the log lists, so a batch is
visible exactly when its entry exists; the entry is written to a hidden temporary name
and renamed into place, so it appears whole or not at all.

The sink writes this log itself because its read tasks write the part files themselves
(``files.py``): the rows never enter the JVM. A changelog started by Spark's file sink
(earlier versions of mysqlcdc) goes on in the same log. A batch whose entry exists is
committed already: a replay after a crash skips it, as Spark's sink does.

Entries older than the previous compaction are deleted after Spark's cleanup delay, as
Spark's sink does. ``retention_s`` is the file-sink TTL: a compaction leaves out files written longer ago
than that; they are then orphans, which ``maintenance.remove_orphans`` deletes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterable, Mapping

from mysqlcdc.sinks.changelog.files import files_under

__all__ = ["SinkLog", "COMPACT_INTERVAL", "data_files"]

COMPACT_INTERVAL = 10        # spark.sql.streaming.fileSink.log.compactInterval's default
CLEANUP_DELAY_S = 600.0      # spark.sql.streaming.fileSink.log.cleanupDelay's default
_VERSION = "v1"
_BLOCK_SIZE = 32 << 20


class SinkLog:
    """The ``_spark_metadata`` log of the Parquet changelog at ``root`` (a local folder)."""

    def __init__(self, root: str | Path, *, retention_s: float | None = None) -> None:
        self.root = Path(root)
        self.folder = self.root / "_spark_metadata"
        self.retention_s = retention_s
        self._interval: int | None = None

    def _entries(self) -> dict[int, Path]:
        if not self.folder.is_dir():
            return {}
        found: dict[int, Path] = {}
        for entry in self.folder.iterdir():
            stem = entry.name.removesuffix(".compact")
            if not entry.name.startswith(".") and stem.isdigit():
                found[int(stem)] = entry
        return found

    def begin(self) -> bool:
        """Create the empty log of a new changelog before any task writes a file, as Spark's
        own sink does when it starts: Spark reading a folder without ``_spark_metadata``
        lists every file in it, part files still being written included, and fails on
        their missing footer; with the log it reads only committed batches (none yet).

        A folder that already holds data files but no log is left alone: it is not known
        to be a changelog. True when the log was created."""
        if self.folder.is_dir():
            return False
        if self.root.is_dir() and any(data_files(self.root)):
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        return True

    def latest(self) -> int:
        """The newest committed batch id (-1 for none)."""
        return max(self._entries(), default=-1)

    @property
    def interval(self) -> int:
        """The compaction interval the log already follows (as Spark derives it), else
        Spark's default."""
        if self._interval is None:
            compacted = sorted((n for n, p in self._entries().items()
                                if p.name.endswith(".compact")), reverse=True)
            if len(compacted) >= 2:
                self._interval = compacted[0] - compacted[1]
            elif len(compacted) == 1:
                self._interval = _derive_interval(COMPACT_INTERVAL, compacted[0] + 1)
            else:
                self._interval = COMPACT_INTERVAL
        return self._interval

    def is_compaction(self, batch_id: int) -> bool:
        return (batch_id + 1) % self.interval == 0

    def add(self, batch_id: int, files: Iterable[Mapping]) -> bool:
        """Commit ``batch_id`` listing ``files`` (``files.files_schema()`` rows, paths relative
        to the root). False when the log holds the batch already (a replay)."""
        if batch_id <= self.latest():
            return False
        lines = [self._line(f) for f in files]
        if self.is_compaction(batch_id):
            lines = self._live_lines(batch_id) + lines
            name = f"{batch_id}.compact"
        else:
            name = str(batch_id)
        self._write(name, lines)
        if self.is_compaction(batch_id):
            self._expire(batch_id - self.interval)
        return True

    def _expire(self, keep_from: int) -> None:
        """Delete the entries before ``keep_from`` (the previous compaction, which the new
        one holds), once older than Spark's cleanup delay (a reader may be reading them),
        so the log stays a couple of compactions long instead of one file per batch."""
        cutoff = time.time() - CLEANUP_DELAY_S
        for n, path in self._entries().items():
            try:
                if n < keep_from and path.stat().st_mtime < cutoff:
                    path.unlink()
            except FileNotFoundError:
                pass

    def _line(self, f: Mapping) -> str:
        path = (self.root / f["path"]).resolve()
        return json.dumps({"path": path.as_uri(), "size": int(f["size"]), "isDir": False,
                           "modificationTime": int(f["modification_time"]),
                           "blockReplication": 1, "blockSize": _BLOCK_SIZE, "action": "add"},
                          separators=(",", ":"))

    def _live_lines(self, batch_id: int) -> list[str]:
        """Every file line of the entries Spark would read before ``batch_id`` (the newest
        compaction and the batches after it), less those past ``retention_s``."""
        entries = self._entries()
        before = [n for n in entries if n < batch_id]
        compacted = [n for n in before if entries[n].name.endswith(".compact")]
        first = max(compacted, default=-1)
        cutoff = None if self.retention_s is None else \
            (time.time() - self.retention_s) * 1000
        out: list[str] = []
        for n in sorted(before):
            if n < first:
                continue
            for line in entries[n].read_text().splitlines()[1:]:
                if not line.strip():
                    continue
                item = json.loads(line)
                if item.get("action", "add") != "add":
                    continue
                if cutoff is not None and item.get("modificationTime", 0) < cutoff:
                    continue
                out.append(line)
        return out

    def _write(self, name: str, lines: list[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(_VERSION)
            for line in lines:
                out.write("\n")
                out.write(line)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.folder / name)


def data_files(root: Path) -> Iterable[Path]:
    """The data files under ``root``: every file outside hidden and ``_`` folders whose name
    starts with neither ``.`` nor ``_`` (what Spark's listing reads)."""
    return (Path(folder) / name for folder, name in files_under(root)
            if not name.startswith((".", "_")))


def _derive_interval(default: int, compacted_batches: int) -> int:
    """Spark's rule for a log with a single compaction (after ``compacted_batches``
    batches): the first divisor of it not below the default, else itself."""
    if compacted_batches <= default:
        return compacted_batches
    if default < compacted_batches // 2:
        for candidate in range(default, compacted_batches // 2 + 1):
            if compacted_batches % candidate == 0:
                return candidate
    return compacted_batches
