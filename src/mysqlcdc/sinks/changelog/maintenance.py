"""Keeping a changelog exact and small: orphan files, compaction, retention, checks.

Parquet (Spark's file-sink log, written by Spark's sink or by ours, ``sinklog.py``): a
batch writes its part files first and lists them in ``_spark_metadata/<batch>`` last. A process killed in between leaves files no log
entry names (orphans, sometimes 0 bytes); the replayed batch writes new ones. Spark
reads through the log and never sees them; a plain Parquet reader of the folder
(pyarrow.dataset, DuckDB, polars, pandas) does. :func:`remove_orphans` deletes the
part files the log does not list, never a listed one. Files of a batch still being
written are newer than the newest log entry; only files older than it are removed
while a pipeline may be running (``settled_only``).

``retention`` on Parquet is Spark's file-sink TTL: when the log is compacted (every
``spark.sql.streaming.fileSink.log.compactInterval`` batches, 10 by default) the files
written longer than ``retention`` ago are left out; they are then files the log does
not list, which :func:`remove_orphans` deletes (at the sink's start, after each log
compaction while it runs, and by ``mysqlcdc changelog vacuum``).

Delta: every commit is atomic, so there are no orphans for readers. Compaction
(``optimize.compact``) and retention (a delete by ``ts_ms``) are commits too, and
``vacuum`` deletes files no version within ``vacuum_after`` still needs.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from mysqlcdc.sinks.changelog.files import remove_unfinished, unfinished_files
from mysqlcdc.sinks.changelog.settings import ChangelogSettings
from mysqlcdc.sinks.changelog.sinklog import data_files
from mysqlcdc.sinks.deltacommit import open_table, table_uri

__all__ = ["committed_files", "orphan_files", "remove_orphans", "remove_settled_unfinished",
           "ParquetCheck", "DeltaCheck", "check", "maintain_delta", "Maintenance", "local_path"]

log = logging.getLogger(__name__)

_LOG_DIR = "_spark_metadata"


def local_path(path: str) -> Path | None:
    """The changelog folder as a local path, None for a remote URI (s3a://, hdfs://)."""
    if "://" in path and not path.startswith("file:"):
        return None
    return Path(path.removeprefix("file://").removeprefix("file:"))


# --- parquet -----------------------------------------------------------------


def committed_files(root: Path) -> set[Path]:
    """Every data file the ``_spark_metadata`` log of ``root`` lists now.

    As Spark reads its own log: the newest compacted entry (``N.compact``, which holds
    every file still listed up to batch N) plus the batch entries after it. Older
    entries stay on disk for a while after a compaction; a file they name but the newest
    compaction dropped (Spark's file-sink ``retention`` expired it) is no longer part of
    the changelog."""
    import json

    files: set[Path] = set()
    for entry in _live_log_entries(root / _LOG_DIR):
        try:
            lines = entry.read_text().splitlines()
        except OSError:
            continue
        for line in lines[1:]:                     # first line: the log format version
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if item.get("action", "add") != "add" or item.get("isDir"):
                continue
            files.add(Path(os.path.realpath(unquote(urlparse(item["path"]).path))))
    return files


def _live_log_entries(meta: Path) -> list[Path]:
    """The log entries Spark reads: the newest ``.compact`` and every batch after it."""
    if not meta.is_dir():
        return []
    batches: dict[int, Path] = {}
    for entry in meta.iterdir():
        stem = entry.name.removesuffix(".compact")
        if entry.name.startswith(".") or not stem.isdigit():
            continue
        batches[int(stem)] = entry
    compacted = [n for n, p in batches.items() if p.name.endswith(".compact")]
    first = max(compacted, default=-1)
    return [batches[n] for n in sorted(batches) if n >= first]


def _newest_log_entry_mtime(root: Path) -> float:
    meta = root / _LOG_DIR
    if not meta.is_dir():
        return 0.0
    times = [p.stat().st_mtime for p in meta.iterdir() if not p.name.startswith(".")]
    return max(times, default=0.0)


def orphan_files(root: Path, *, settled_only: bool = False) -> list[Path]:
    """Data files under ``root`` the metadata log does not list: leftovers of killed
    batches, and files ``retention`` expired from the log.

    ``settled_only``: only those older than the newest log entry, which cannot belong
    to a batch being written right now."""
    committed = committed_files(root)
    cutoff = _newest_log_entry_mtime(root) if settled_only else None
    found = []
    for path in data_files(root):
        if Path(os.path.realpath(path)) in committed:
            continue
        if cutoff is not None and path.stat().st_mtime >= cutoff:
            continue
        found.append(path)
    return sorted(found)


def remove_orphans(path: str, *, settled_only: bool = False) -> list[Path]:
    """Delete the orphans of a Parquet changelog (and their ``.crc`` files); returns them.

    A folder with no metadata log yet has no committed files, and nothing is removed
    (it is not known to be a changelog)."""
    root = local_path(path)
    if root is None:
        log.warning("changelog %s is not a local folder: leftover files of killed batches are "
                    "not removed; read it through Spark or use format: delta", path)
        return []
    if not (root / _LOG_DIR).is_dir():
        return []
    removed = orphan_files(root, settled_only=settled_only)
    for orphan in removed:
        orphan.unlink(missing_ok=True)
        (orphan.parent / f".{orphan.name}.crc").unlink(missing_ok=True)
    if removed:
        log.warning("changelog %s: removed %d file(s) of killed batches that were never "
                    "committed", path, len(removed))
    return removed


def remove_settled_unfinished(path: str) -> int:
    """Delete the hidden files killed tasks of any writer left in a Parquet changelog,
    those last written before its newest log entry (a running batch's files are newer:
    batches are written one after the other), while pipelines may run. Returns how many."""
    root = local_path(path)
    if root is None or not (root / _LOG_DIR).is_dir():
        return 0
    return remove_unfinished(str(root), older_than=_newest_log_entry_mtime(root))


@dataclass
class ParquetCheck:
    path: str
    committed_files: int = 0
    committed_rows: int = 0
    orphan_files: int = 0
    orphan_rows: int = 0
    empty_orphans: int = 0
    unfinished_files: int = 0
    missing_files: list[str] = field(default_factory=list)

    @property
    def plain_reader_rows(self) -> int | None:
        """What a plain Parquet reader of the folder sees (None: it fails on a 0-byte file)."""
        if self.empty_orphans:
            return None
        return self.committed_rows + self.orphan_rows

    @property
    def exact(self) -> bool:
        return not self.orphan_files and not self.missing_files

    def line(self) -> str:
        head = (f"parquet {self.path}: {self.committed_files} committed files, "
                f"{self.committed_rows} changes")
        if self.unfinished_files:
            head += (f", {self.unfinished_files} hidden unfinished file(s) (being written, "
                     "or left by killed tasks: no reader sees them)")
        if self.missing_files:
            return (f"{head}; {len(self.missing_files)} committed file(s) MISSING, e.g. "
                    f"{self.missing_files[0]}")
        if not self.orphan_files:
            return f"{head}; no orphans: exact for Spark and for plain Parquet readers"
        plain = ("fails (a 0-byte file)" if self.plain_reader_rows is None
                 else f"sees {self.plain_reader_rows} rows")
        return (f"{head}; {self.orphan_files} orphan file(s) (killed batches' leftovers, "
                f"or files `retention` expired from the log) "
                f"({self.orphan_rows} rows): a plain Parquet reader {plain}, Spark is exact; "
                "they are removed when the pipeline starts, after Spark's log compactions while "
                "it runs with `retention`, or by `mysqlcdc changelog vacuum`")


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def check_parquet(path: str) -> ParquetCheck:
    root = local_path(path)
    result = ParquetCheck(path)
    if root is None or not root.is_dir():
        return result
    committed = committed_files(root)
    result.committed_files = len(committed)
    result.unfinished_files = len(unfinished_files(str(root)))
    for f in committed:
        if not f.is_file():
            result.missing_files.append(str(f))
            continue
        result.committed_rows += _rows(f)
    for orphan in orphan_files(root):
        result.orphan_files += 1
        if orphan.stat().st_size == 0:
            result.empty_orphans += 1
            continue
        try:
            result.orphan_rows += _rows(orphan)
        except Exception:  # noqa: BLE001 - a torn file: a plain reader fails on it too
            result.empty_orphans += 1
    return result


# --- delta -------------------------------------------------------------------


@dataclass
class DeltaCheck:
    path: str
    version: int | None = None
    files: int = 0
    rows: int = 0
    partitions: int = 0
    last_batch: str | None = None
    last_position: str | None = None

    @property
    def exact(self) -> bool:
        return True

    def line(self) -> str:
        if self.version is None:
            return f"delta {self.path}: no table yet"
        where = f", batch {self.last_batch} at {self.last_position}" if self.last_batch else ""
        return (f"delta {self.path}: version {self.version}, {self.files} files in "
                f"{self.partitions} partition(s), {self.rows} changes{where}; exact for every "
                "Delta reader")


def check_delta(path: str) -> DeltaCheck:
    uri = table_uri(path)
    table = open_table(uri)
    result = DeltaCheck(path)
    if table is None:
        return result
    result.version = table.version()
    import pyarrow as pa

    adds = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    result.files = len(adds.get("path", []))
    result.rows = int(sum(n or 0 for n in adds.get("num_records", [])))
    keys = [k for k in adds if k.startswith("partition.")]
    result.partitions = len(set(zip(*(adds[k] for k in keys)))) if keys else (1 if result.files else 0)
    for entry in table.history(limit=50):
        if "mysqlcdc.batch_id" in entry:
            result.last_batch = entry.get("mysqlcdc.batch_id")
            result.last_position = entry.get("mysqlcdc.end_position")
            break
    return result


def check(settings: ChangelogSettings):
    return check_delta(settings.path) if settings.format == "delta" else check_parquet(settings.path)


@dataclass
class Maintenance:
    """What one compaction pass did."""

    deleted_rows: int = 0
    files_removed: int = 0
    files_added: int = 0
    vacuumed: int = 0

    def line(self) -> str:
        return (f"compacted {self.files_removed} file(s) into {self.files_added}, expired "
                f"{self.deleted_rows} change(s), vacuumed {self.vacuumed} file(s)")


def maintain_delta(settings: ChangelogSettings, *, compact: bool = True,
                   vacuum: bool = True, now_ms: int | None = None) -> Maintenance:
    """Retention, compaction and vacuum of a Delta changelog, each its own commit.

    Readers see the same changes before and after compaction (it only rewrites files);
    retention deletes exactly the changes older than ``retention_s`` by ``ts_ms``."""
    uri = table_uri(settings.path)
    table = open_table(uri)
    done = Maintenance()
    if table is None:
        return done
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if settings.retention_s is not None:
        cutoff = now_ms - int(settings.retention_s * 1000)
        metrics = table.delete(f"ts_ms < {cutoff}")
        done.deleted_rows = int(metrics.get("num_deleted_rows", 0) or 0)
    if compact:
        metrics = table.optimize.compact(target_size=settings.target_file_bytes)
        done.files_removed = int(metrics.get("numFilesRemoved", 0) or 0)
        done.files_added = int(metrics.get("numFilesAdded", 0) or 0)
    if vacuum:
        hours = max(0, int(settings.vacuum_after_s // 3600))
        done.vacuumed = len(table.vacuum(retention_hours=hours, dry_run=False,
                                         enforce_retention_duration=False))
    return done


class CompactionClock:
    """Decides, batch by batch, when maintenance is due (``compact_every``; hourly when
    only ``retention`` is set).

    Counts batches and seconds since the last compaction of this process; the first
    pass is due after one full interval from the sink's start."""

    def __init__(self, settings: ChangelogSettings, clock=time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self.batches = 0
        self.since = clock()

    def tick(self) -> bool:
        self.batches += 1
        batches, seconds = self.settings.maintenance_every
        due = ((batches is not None and self.batches >= batches)
               or (seconds is not None and self.clock() - self.since >= seconds))
        if due:
            self.batches = 0
            self.since = self.clock()
        return due
