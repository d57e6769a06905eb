"""A task's changes -> Parquet part files of the changelog, named back to the driver.

Both changelog formats write their data files the same way: a Spark task streams its
rows into one Parquet file per partition value (``db=…/table=…/part-….parquet`` under
the changelog folder) and returns one small row per file (``FILES_DDL``: its path
relative to the folder, size, partition values, modification time and statistics).
Nobody reads a file until the driver commits the batch: an entry in Spark's
``_spark_metadata`` log (``format: parquet``, ``sinklog.py``) or a Delta commit
(``format: delta``). Files of a task attempt that failed, or of a batch killed before
its commit, are in no commit: readers never see them and maintenance removes them.

A file is written under a hidden name (``.part-….parquet.OWNER.inprogress``, OWNER
naming the pipeline's sink) and renamed to its own when the task closes it, so even a
reader that lists the folder instead of reading the commits (a plain Parquet reader)
never meets a file without its footer; the hidden files a killed task leaves are removed
when the same sink starts again (:func:`remove_unfinished`), never another writer's.

:class:`PartFiles` runs inside the source's own read tasks (DESIGN.md decision 20), so
the rows go from the decoder to Parquet in one Python process and never cross into the
JVM; with an ordered transform before the sink it runs as a ``mapInArrow`` instead.

Memory is bounded by ``buffer_bytes`` (decision 18): rows wait per partition value until
a row group's worth has gathered, and the largest buffer is written out whenever the
task holds more than that in all. A row group is encoded and compressed on a thread of
its own (Arrow's Parquet writer releases the GIL) while the task decodes the next rows,
one row group at a time.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["PartFiles", "FILES_DDL", "files_schema", "escape_partition_value",
           "remove_unfinished", "unfinished_files", "files_under", "owner_tag",
           "UNFINISHED_SUFFIX"]

FILES_DDL = ("path STRING, size BIGINT, partition_values STRING, modification_time BIGINT, "
             "stats STRING")


@functools.cache
def files_schema() -> pa.Schema:
    """The Arrow schema of ``FILES_DDL``. Made when first asked for, as pyarrow is imported
    only where files are written: a sink's task writer is also unpickled where Spark only
    asks the source for its schema (the DDL text)."""
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("size", pa.int64()),
                      ("partition_values", pa.string()),
                      ("modification_time", pa.int64()), ("stats", pa.string())])

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
UNFINISHED_SUFFIX = ".inprogress"
# the characters Spark escapes in a partition folder name (as %XX), so its partition
# discovery reads back exactly the value that was written
_ESCAPED = frozenset([chr(c) for c in range(1, 32)] +
                     list('"#%\'*/:=?\\\x7f{[]^'))


def escape_partition_value(value) -> str:
    """A partition value as a folder name part, the way Spark writes it."""
    if value is None or value == "":
        return NULL_PARTITION
    text = str(value)
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in text)


@dataclass
class _File:
    rel: str
    values: dict
    writer: object
    unfinished: str                 # the hidden name it is written under until closed
    rows: int = 0
    ts_min: int | None = None
    ts_max: int | None = None
    ts_nulls: int = 0
    pending: list = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0


@dataclass(frozen=True)
class PartFiles:
    """Writes a task's record batches into part files under ``root`` (a local folder every
    executor sees) and yields one :func:`files_schema` batch naming them.

    ``batch_id``: the micro-batch, for the file names (from the task's local properties
    when None). ``row_group_rows``: rows per Parquet row group. ``owner``: the writer's
    tag in the hidden name a file has while it is written (:func:`owner_tag`)."""

    root: str
    partition_by: tuple[str, ...] = ("db", "table")
    batch_id: int | None = None
    row_group_rows: int = 131072
    buffer_bytes: int = 64 << 20
    owner: str = "mysqlcdc"

    ddl = FILES_DDL

    def write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        state = _TaskFiles(self)
        try:
            for batch in batches:
                if batch.num_rows:
                    state.add(batch)
            out = state.close()
        except OSError as exc:        # a full disk, a folder not ours: named, with the place
            state.abandon()
            from mysqlcdc.errors import StorageWriteError

            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise StorageWriteError(f"the changelog cannot write its files under "
                                    f"{self.root}: {reason}") from exc
        except BaseException:
            state.abandon()           # the files stay in no commit: orphans, removed later
            raise
        if out.num_rows:
            yield out

    __call__ = write            # a ``mapInArrow`` function too


# Columns whose values (nearly) never repeat. The writer would hash every value into a
# dictionary until it outgrows its page limit and then write the rest plain anyway: they
# are written plain from the start. On the bench's wide rows that is a quarter less of
# the writer's CPU, and the files are no larger (docs/BENCHMARKS.md, "Less CPU beside
# the decode").
_UNIQUE_COLUMNS = frozenset({"before", "after", "key", "seq", "moved_key"})


class _TaskFiles:
    """The open files of one task."""

    def __init__(self, spec: PartFiles) -> None:
        self.spec = spec
        self.parts = list(spec.partition_by)
        self.files: dict[tuple, _File] = {}
        self.buffered = 0
        self.token = uuid.uuid4().hex
        self.task, self.batch = _task_place(spec.batch_id)
        self.pool = None           # the writing thread, started with the first row group
        self.writing = None        # the row group being written (a Future)

    def add(self, batch: pa.RecordBatch) -> None:
        if not self.parts:
            self._buffer((), batch)
            return
        for key, rows in _split(batch, self.parts):
            self._buffer(key, rows)

    def _buffer(self, key: tuple, batch: pa.RecordBatch) -> None:
        entry = self.files.get(key) or self._open(key, batch)
        data = batch.drop_columns(self.parts) if self.parts else batch
        entry.pending.append(data)
        entry.pending_rows += data.num_rows
        size = data.nbytes
        entry.pending_bytes += size
        self.buffered += size
        if entry.pending_rows >= self.spec.row_group_rows:
            self._flush(entry)
        while self.buffered > self.spec.buffer_bytes:
            self._flush(max(self.files.values(), key=lambda f: f.pending_bytes))

    def _open(self, key: tuple, batch: pa.RecordBatch) -> _File:
        import pyarrow.parquet as pq

        folder = "/".join(f"{c}={escape_partition_value(v)}" for c, v in zip(self.parts, key))
        name = (f"part-{self.task:05d}-{self.batch:010d}-{self.token}-{len(self.files):04d}"
                ".c000.snappy.parquet")
        rel = f"{folder}/{name}" if folder else name
        full = os.path.join(self.spec.root, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        schema = batch.schema
        if self.parts:
            import pyarrow as pa

            schema = pa.schema([f for f in schema if f.name not in self.parts])
        dictionary = [name for name in schema.names if name not in _UNIQUE_COLUMNS]
        unfinished = os.path.join(os.path.dirname(full),
                                  f".{name}.{self.spec.owner}{UNFINISHED_SUFFIX}")
        entry = _File(rel=rel, values=dict(zip(self.parts, key)), unfinished=unfinished,
                      writer=pq.ParquetWriter(unfinished, schema, compression="snappy",
                                              use_dictionary=dictionary))
        self.files[key] = entry
        return entry

    def _flush(self, entry: _File) -> None:
        if not entry.pending:
            return
        import pyarrow as pa

        table = pa.Table.from_batches(entry.pending)
        self.buffered -= entry.pending_bytes
        entry.pending, entry.pending_rows, entry.pending_bytes = [], 0, 0
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(1, thread_name_prefix="changelog-parquet")
        self._wait()                            # one row group in flight at a time
        self.writing = self.pool.submit(_write_group, entry, table)

    def _wait(self) -> None:
        if self.writing is not None:
            writing, self.writing = self.writing, None
            writing.result()                    # a write's error fails the task here

    def abandon(self) -> None:
        """Stop writing after a failure: the writing thread ends, the files are closed."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        for entry in self.files.values():
            try:
                entry.writer.close()
            except Exception:  # noqa: BLE001 - the task fails with the first error anyway
                pass
            try:
                os.unlink(entry.unfinished)
            except OSError:
                pass

    def close(self) -> pa.RecordBatch:
        from mysqlcdc.arrowbuild import record_batch

        schema = files_schema()
        out: dict[str, list] = {name: [] for name in schema.names}
        try:
            for entry in self.files.values():
                self._flush(entry)
            self._wait()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)
        for entry in self.files.values():
            entry.writer.close()
            full = os.path.join(self.spec.root, entry.rel)
            os.replace(entry.unfinished, full)
            stats: dict = {"numRecords": entry.rows}
            if entry.ts_min is not None:
                stats.update(minValues={"ts_ms": entry.ts_min},
                             maxValues={"ts_ms": entry.ts_max},
                             nullCount={"ts_ms": entry.ts_nulls})
            out["path"].append(entry.rel)
            out["size"].append(os.path.getsize(full))
            out["partition_values"].append(json.dumps(
                {k: (None if v is None else str(v)) for k, v in entry.values.items()}))
            out["modification_time"].append(int(os.path.getmtime(full) * 1000))
            out["stats"].append(json.dumps(stats))
        self.files.clear()
        return record_batch(out, schema)


def _write_group(entry: _File, table: pa.Table) -> None:
    """Write ``table`` as one row group of ``entry``'s file (on the writing thread)."""
    entry.writer.write_table(table, row_group_size=max(table.num_rows, 1))
    entry.rows += table.num_rows
    if "ts_ms" in table.column_names:
        _note_ts(entry, table.column("ts_ms"))


def _note_ts(entry: _File, ts) -> None:
    import pyarrow.compute as pc

    entry.ts_nulls += ts.null_count
    bounds = pc.min_max(ts).as_py()
    lo, hi = bounds["min"], bounds["max"]
    if lo is not None:
        entry.ts_min = lo if entry.ts_min is None else min(entry.ts_min, lo)
        entry.ts_max = hi if entry.ts_max is None else max(entry.ts_max, hi)


def _split(batch: pa.RecordBatch, parts: list[str]):
    """(partition key, rows) for each partition value of ``batch``, rows in their order.

    A read task's batch is mostly one table's rows in runs: when every partition column
    holds one value, the batch is one part as it is."""
    import numpy as np

    from mysqlcdc.arrowbuild import group_codes, group_values, int64_array

    cols = [batch.column(c) for c in parts]
    if all(_single(c) for c in cols):
        yield tuple(c[0].as_py() for c in cols), batch
        return
    codes, names = group_codes(cols)
    order = np.argsort(codes, kind="stable")     # each group's rows together, in their order
    starts = np.flatnonzero(np.diff(codes[order], prepend=-1))
    ends = np.append(starts[1:], len(order))
    for i in np.argsort(order[starts]).tolist():   # the groups in the order they first appear
        rows = order[starts[i]:ends[i]]
        yield group_values(int(codes[rows[0]]), names), batch.take(int64_array(rows))


def _single(column) -> bool:
    """Whether every value of ``column`` is the same (nulls included)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(column) == 0:
        return True
    nulls = column.null_count
    if nulls:
        return nulls == len(column)
    bounds = pc.min_max(column).as_py() if not pa.types.is_string(column.type) else None
    if bounds is not None:
        return bounds["min"] == bounds["max"]
    return pc.count_distinct(column).as_py() == 1


def _task_place(batch_id: int | None) -> tuple[int, int]:
    """(partition id, micro-batch id) of the running Spark task ((0, batch_id or 0) outside
    one)."""
    try:
        from pyspark import TaskContext
    except ImportError:                   # pragma: no cover - pyspark is a dependency
        return 0, batch_id or 0
    tc = TaskContext.get()
    if tc is None:
        return 0, batch_id or 0
    if batch_id is None:
        prop = tc.getLocalProperty("streaming.sql.batchId")
        batch_id = int(prop) if prop is not None else 0
    return tc.partitionId(), batch_id


def owner_tag(pipeline: str, sink_index: int) -> str:
    """The tag of one pipeline's sink in the hidden names of the files it is writing."""
    import hashlib

    return hashlib.sha256(f"{pipeline}\x00{sink_index}".encode()).hexdigest()[:12]


def files_under(root: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """``(folder, name)`` of every file under ``root`` outside hidden and ``_`` folders
    (``_spark_metadata``, ``_delta_log``): where the changelog's data files live."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
        for name in filenames:
            yield dirpath, name


def unfinished_files(root: str, owner: str | None = None) -> list[str]:
    """The hidden files under ``root`` that tasks are writing or killed tasks left:
    ``owner``'s only when given."""
    tail = f".{owner}{UNFINISHED_SUFFIX}" if owner else UNFINISHED_SUFFIX
    return [os.path.join(folder, name) for folder, name in files_under(root)
            if name.startswith(".part-") and name.endswith(tail)]


def remove_unfinished(root: str, owner: str | None = None,
                      older_than: float | None = None) -> int:
    """Delete the hidden files killed tasks left under ``root`` (a local folder) while
    writing: ``owner``'s only (when its sink starts, no task of it runs), or every
    writer's last modified before ``older_than`` (a time; a vacuum while pipelines run).
    Returns how many were removed."""
    removed = 0
    for path in unfinished_files(root, owner):
        try:
            if older_than is not None and os.stat(path).st_mtime >= older_than:
                continue
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
