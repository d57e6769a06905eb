"""What a read task does to its record batches on their way out.

* **seq epoch**: after a pipeline followed a failover to another server, its offsets carry
  ``epoch`` (how many it followed) and every seq gets ``epoch * SEQ_EPOCH`` added, so the
  new server's changes sort after the old one's whatever its binlog files are numbered.
* **counts**: rows and rows events per (db, table, op), totalled per Python worker process
  and written after each task to ``<counts>/<host>-<pid>-<id>.json`` (one file per process,
  rewritten whole), which ``mysqlcdc serve`` sums for its per-table metrics. A batch
  replayed after a crash is counted again: the counters say what was read.
"""

from __future__ import annotations

import os
import threading
from decimal import Decimal
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.arrowbuild import group_codes, group_values, true_or_null
from mysqlcdc.stats import process_files, save_process_file
from mysqlcdc.types import SEQ_EPOCH

__all__ = ["finish_batches", "shift_seq", "read_counts"]

_SEQ = pa.decimal128(38, 0)
_WIDE = pa.decimal256(40, 0)
_TOTALS: dict[str, dict[tuple[str, str, str], list[int]]] = {}
_LOCK = threading.Lock()


def shift_seq(batch: pa.RecordBatch, epoch: int) -> pa.RecordBatch:
    """``batch`` with ``epoch * SEQ_EPOCH`` added to every seq."""
    index = batch.schema.get_field_index("seq")
    wide = pc.add(pc.cast(batch.column(index), _WIDE),
                  pa.scalar(Decimal(epoch * SEQ_EPOCH), _WIDE))
    return batch.set_column(index, batch.schema.field(index), pc.cast(wide, _SEQ))


def finish_batches(batches: Iterable[pa.RecordBatch], epoch: int = 0,
                   counts: str | None = None) -> Iterator[pa.RecordBatch]:
    """``batches`` with the seq epoch applied, counted into ``counts`` if set."""
    last: list = [None]
    seen: dict[tuple[str, str, str], list[int]] = {}
    try:
        for batch in batches:
            if epoch:
                batch = shift_seq(batch, epoch)
            if counts is not None and batch.num_rows:
                _count(batch, seen, last)
            yield batch
    finally:
        if counts is not None and seen:
            _flush(counts, seen)


def _count(batch: pa.RecordBatch, into: dict, last: list) -> None:
    """Rows and events (runs of one file:pos) per (db, table, op).

    Counted from the columns' dictionary codes with numpy, from Arrow's buffers: pyarrow's
    group_by would import its query engine (and ``to_numpy`` pandas) into a read task that
    otherwise only moves batches along."""
    n = batch.num_rows
    files, positions = batch.column("file"), batch.column("pos")
    first = (files[0].as_py(), positions[0].as_py()) != last[0]
    last[0] = (files[-1].as_py(), positions[-1].as_py())
    codes, names = group_codes([batch.column(c) for c in ("db", "table", "op")])
    groups, codes = np.unique(codes, return_inverse=True)
    rows = np.bincount(codes, minlength=len(groups))
    events = np.zeros(len(groups), np.int64)
    events[codes[0]] += first
    if n > 1:    # row i > 0 starts an event where its file:pos differs from row i - 1's
        new = pc.or_(pc.not_equal(positions.slice(1), positions.slice(0, n - 1)),
                     pc.not_equal(files.slice(1), files.slice(0, n - 1)))
        events += np.bincount(codes[1:][true_or_null(new)], minlength=len(groups))
    for g, code in enumerate(groups.tolist()):
        key = tuple(v or "" for v in group_values(code, names))
        totals = into.setdefault(key, [0, 0])
        totals[0] += int(rows[g])
        totals[1] += int(events[g])


def _flush(folder: str, seen: dict) -> None:
    with _LOCK:
        totals = _TOTALS.setdefault(folder, {})
        for key, (rows, events) in seen.items():
            t = totals.setdefault(key, [0, 0])
            t[0] += rows
            t[1] += events
        data = [[*k, r, e] for k, (r, e) in sorted(totals.items())]
    save_process_file(folder, data)   # a folder this executor does not see: no metrics


def read_counts(folder: str | os.PathLike) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(rows, events) per (db, table, op), summed over every process's file."""
    out: dict[tuple[str, str, str], list[int]] = {}
    for data in process_files(folder):
        for db, table, op, rows, events in data:
            t = out.setdefault((db, table, op), [0, 0])
            t[0] += int(rows)
            t[1] += int(events)
    return {k: (v[0], v[1]) for k, v in out.items()}
