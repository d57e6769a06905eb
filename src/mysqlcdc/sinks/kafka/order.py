"""A write task's rows in ``seq`` order, in memory bounded by a setting.

Spark's streaming plans allow no sort, and the rows of a key reach its write task from
every read task of the micro-batch (slices arrive in any order), so the task orders
them itself. Up to ``budget`` bytes of record batches are kept and sorted in memory;
past that, each full buffer is sorted and spilled to a local Arrow file, and the
sorted runs are merged by ``seq`` at the end, a window at a time. A micro-batch of
any size (one transaction of millions of rows is one micro-batch) then costs the
budget plus one record batch per run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SeqSorter"]

_CHUNK = 8192          # rows per record batch handed out


class SeqSorter:
    """Collect record batches with :meth:`add`, then take them sorted by ``seq``."""

    def __init__(self, budget: int, spill_dir: str | None = None) -> None:
        self.budget = budget
        self._spill_dir = spill_dir
        self._folder: str | None = None
        self._batches: list[pa.RecordBatch] = []
        self._size = 0
        self.runs: list[str] = []           # spilled sorted runs (Arrow files)

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._batches.append(batch)
        self._size += batch.nbytes
        if self._size > self.budget:
            self._spill()

    def sorted(self) -> Iterator[pa.RecordBatch]:
        """Every row added, in ``seq`` order, a record batch at a time."""
        try:
            if not self.runs:
                yield from _sorted(self._batches).to_batches(_CHUNK)
                return
            if self._batches:
                self._spill()
            yield from _merge([_read(path) for path in self.runs])
        finally:
            self.close()

    def close(self) -> None:
        self._batches, self._size = [], 0
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder, self.runs = None, []

    def _spill(self) -> None:
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="mysqlcdc-kafka-sort-", dir=self._spill_dir)
        table = _sorted(self._batches)
        path = os.path.join(self._folder, f"run-{len(self.runs)}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            for batch in table.to_batches(_CHUNK):
                writer.write_batch(batch)
        self.runs.append(path)
        self._batches, self._size = [], 0


def _sorted(batches: list[pa.RecordBatch]) -> pa.Table:
    table = pa.Table.from_batches(batches) if batches else None
    if table is None:
        return pa.table({})
    return table.take(pc.sort_indices(table, [("seq", "ascending")]))


def _read(path: str) -> Iterator[pa.RecordBatch]:
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def _merge(runs: list[Iterator[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """Merge sorted runs: each round hands out, sorted, every row up to the smallest of
    the runs' current batches' largest seq (all of them precede what is left)."""
    heads: list[pa.RecordBatch | None] = [next(run, None) for run in runs]
    while any(h is not None for h in heads):
        live = [h for h in heads if h is not None]
        bound = pa.scalar(min(pc.max(h.column("seq")).as_py() for h in live),
                          live[0].schema.field("seq").type)
        taken = []
        for i, head in enumerate(heads):
            if head is None:
                continue
            upto = pc.less_equal(head.column("seq"), bound)
            taken.append(head.filter(upto))
            rest = head.filter(pc.invert(upto))
            heads[i] = rest if rest.num_rows else next(runs[i], None)
        yield from _sorted([t for t in taken if t.num_rows]).to_batches(_CHUNK)
