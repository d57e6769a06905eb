"""A list of transforms, cut into the stages Spark runs, and one stage run in a task.

Stage 0 holds the transforms before the first *ordered* one and runs in every read
partition in parallel. If the list has an ordered transform (``flatten``), stage 1
runs it and everything after it in a single task that first sorts the micro-batch's
rows by ``seq``, so state is built in exact binlog order. Each stage declares its
output schema (the envelope plus the columns its transforms add) up front.

A stage run (:meth:`Chain.run_stage`) feeds every record batch of the task through its
transforms, then writes the task's dead letters before the task ends, so a batch whose
dead letters cannot be written fails and is replayed: nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.transforms.api import DeadLetterWriter, TaskPlace, Transform, TransformContext
from mysqlcdc.transforms.batch import EventBatch

__all__ = ["Chain", "SPARK_TYPES"]

SPARK_TYPES = {pa.string(): "STRING", pa.int64(): "BIGINT", pa.int32(): "INT",
               pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN",
               pa.decimal128(38, 0): "DECIMAL(38,0)"}


@dataclass
class Chain:
    """Everything a task needs to run the transforms of one sink's query (pickles)."""

    transforms: list[Transform]
    pipeline: str = "mysqlcdc"
    sink: str = "0-sink"
    history_dir: str | None = None       # the query's schema history (typed event values)
    state_dir: str | None = None         # where ordered transforms keep their state
    helpers: tuple[str, ...] = ()        # helper module names (shipped with addPyFile)
    dead_letters: DeadLetterWriter | None = None
    _helpers: object = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_helpers"] = None
        return state

    # --- planning (driver) ------------------------------------------------------

    def stages(self) -> list[tuple[bool, list[Transform]]]:
        """``(ordered, transforms)`` per stage, in order."""
        first = next((i for i, t in enumerate(self.transforms) if t.ordered), None)
        if first is None:
            return [(False, self.transforms)] if self.transforms else []
        out = [(False, self.transforms[:first])] if first else []
        return out + [(True, self.transforms[first:])]

    def schema_after(self, stage: int, input_schema: pa.Schema) -> pa.Schema:
        """The schema a stage's output has, given the chain's input schema."""
        schema = input_schema
        for _, transforms in self.stages()[: stage + 1]:
            for t in transforms:
                for name, typ in t.columns().items():
                    if name in schema.names:
                        schema = schema.set(schema.get_field_index(name), pa.field(name, typ))
                    else:
                        schema = schema.append(pa.field(name, typ))
        return schema

    def split(self) -> tuple["Chain | None", "Chain | None"]:
        """(the transforms that need no order, the rest from the first ordered one), each
        a chain of its own (None when empty): the first can run inside the read tasks."""
        first = next((i for i, t in enumerate(self.transforms) if t.ordered), len(self.transforms))
        head, tail = self.transforms[:first], self.transforms[first:]

        def part(transforms: list[Transform]) -> "Chain | None":
            if not transforms:
                return None
            return Chain(transforms, pipeline=self.pipeline, sink=self.sink,
                         history_dir=self.history_dir, state_dir=self.state_dir,
                         helpers=self.helpers, dead_letters=self.dead_letters)
        return part(head), part(tail)

    @staticmethod
    def spark_ddl(schema: pa.Schema) -> str:
        return ", ".join(f"`{f.name}` {SPARK_TYPES[f.type]}" for f in schema)

    # --- running (task) -------------------------------------------------------------

    def context(self, place: TaskPlace) -> TransformContext:
        from mysqlcdc.transforms.events import Definitions
        from mysqlcdc.transforms.helpers import Helpers

        if self._helpers is None:
            self._helpers = Helpers.build(self.helpers)
        definitions = Definitions(self.history_dir)
        return TransformContext(place=place, definitions=definitions, helpers=self._helpers,
                                state_dir=self.state_dir, dead_letters=self.dead_letters)

    def run_stage(self, stage: int, batches: Iterable[pa.RecordBatch], place: TaskPlace,
                  input_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Every batch of a task through stage ``stage``; dead letters written at the end."""
        ordered, transforms = self.stages()[stage]
        out_schema = self.schema_after(stage, input_schema)
        ctx = self.context(place)
        for t in transforms:
            t.open(ctx)
        source = _sorted_by_seq(batches) if ordered else batches
        for batch in source:
            events = EventBatch(batch)
            for t in transforms:
                if not events.num_rows:
                    break
                events = t.apply(events, ctx)
            if events.num_rows:
                yield _conform(events.to_batch(), out_schema)
        for t in transforms:
            t.close(ctx)
        ctx.flush()


def _sorted_by_seq(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task's rows in seq order (the micro-batch is in memory once, as Arrow)."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    table = table.take(pc.sort_indices(table, [("seq", "ascending")]))
    yield from table.combine_chunks().to_batches(max_chunksize=8192)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Columns in the declared order and types (a new column is null where not set)."""
    if batch.schema.equals(schema):
        return batch
    names = batch.schema.names
    arrays = [batch.column(f.name).cast(f.type) if f.name in names
              else pa.nulls(batch.num_rows, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
