"""The contract every transform keeps, and what a transform sees while it runs.

A transform turns a batch of envelope rows (:class:`~mysqlcdc.transforms.batch.EventBatch`
over a ``pyarrow.RecordBatch`` whose columns are the envelope's, docs/ENVELOPE.md) into
another one. Built-ins work on whole batches with Arrow kernels; a user's Python
function sees one event at a time as a dict (:mod:`mysqlcdc.transforms.events`) or a
whole ``RecordBatch`` (``transform_batch``).

A transform is created on the driver, pickled to the Spark tasks, and there
:meth:`Transform.apply`-ed to every batch of the task with a :class:`TransformContext`.
It may add columns (``columns``: name -> Arrow type, declared up front because Spark
needs the output schema before it runs). A transform that needs the stream in binlog
order across the whole micro-batch (``ordered = True``, e.g. ``flatten``) runs in one
task that sees the batch's rows sorted by ``seq``; everything before it runs in
parallel, one task per read partition.

Errors: a transform raising out of ``apply`` fails the task and the micro-batch, so
the query stops with that error and the batch is replayed when the pipeline runs
again. User-code transforms catch exceptions per event and either raise
:class:`~mysqlcdc.errors.TransformError` (``on_error: fail``) or hand the event to
:meth:`TransformContext.dead_letter` (``on_error: dead_letter``).
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from mysqlcdc.transforms.batch import EventBatch

__all__ = ["Transform", "TransformContext", "DeadLetterWriter", "DeadLetter", "TaskPlace",
           "ON_ERROR"]

ON_ERROR = ("fail", "dead_letter")

log = logging.getLogger("mysqlcdc.transforms")


class Transform:
    """Base of every transform. Subclasses set ``kind`` and implement :meth:`apply`."""

    kind = "transform"
    ordered = False          # needs the micro-batch's rows in seq order, in one task
    label = ""               # where it is in the config, e.g. ``transforms[2] (python)``

    def columns(self) -> dict[str, pa.DataType]:
        """Columns this transform adds to the batch (name -> Arrow type)."""
        return {}

    def open(self, ctx: "TransformContext") -> None:
        """Called once per task before the first batch (state, lookups)."""

    def apply(self, events: EventBatch, ctx: "TransformContext") -> EventBatch:
        raise NotImplementedError

    def close(self, ctx: "TransformContext") -> None:
        """Called once per task after the last batch, before the task's output is complete."""

    def describe(self) -> str:
        return self.label or self.kind


@dataclass(frozen=True)
class TaskPlace:
    """Where a task runs: which pipeline, sink query, micro-batch and partition."""

    pipeline: str
    sink: str                    # ``<index>-<type>``, as in the checkpoint folder names
    query_id: str                # Spark's id of the streaming query (kept by its checkpoint)
    batch_id: int
    partition: int
    stage: int


@dataclass
class DeadLetter:
    """One event a transform could not process, and why."""

    event: dict[str, Any]        # the envelope row as it entered the failing transform
    transform: str
    error_type: str
    error_message: str
    traceback: str
    failed_at_ms: int


class DeadLetterWriter(Protocol):
    """Writes a task's dead letters, idempotently per (query, batch, partition, stage):
    a replayed batch replaces its dead letters (Parquet) or repeats them (Kafka, at
    least once). Raises DeadLetterWriteError when the target refuses."""

    def write(self, place: TaskPlace, letters: list[DeadLetter]) -> None: ...


@dataclass
class TransformContext:
    """What a transform sees in a task: where it runs, helpers, the table definitions
    at a position, its state folder and the dead-letter queue of the task."""

    place: TaskPlace
    definitions: Any = None              # transforms.events.Definitions
    helpers: Any = None                  # transforms.helpers.Helpers
    state_dir: str | None = None         # local folder for ordered transforms' state
    dead_letters: DeadLetterWriter | None = None
    letters: list[DeadLetter] = field(default_factory=list)
    logger: logging.Logger = log

    @property
    def batch_id(self) -> int:
        return self.place.batch_id

    def dead_letter(self, event: dict[str, Any], transform: str, exc: BaseException,
                    tb: str | None = None) -> None:
        """Park ``event``: it leaves the batch and is written to the dead-letter sink
        when the task ends (before the batch can commit)."""
        if self.dead_letters is None:
            raise RuntimeError("on_error: dead_letter needs a dead_letter sink in the config")
        self.letters.append(DeadLetter(
            event=event, transform=transform, error_type=type(exc).__name__,
            error_message=str(exc), traceback=tb if tb is not None else _format(exc),
            failed_at_ms=int(time.time() * 1000)))

    def flush(self) -> None:
        """Write the task's dead letters; raises when the dead-letter sink refuses."""
        if self.letters and self.dead_letters is not None:
            self.dead_letters.write(self.place, self.letters)
            self.log_letters()
        self.letters = []

    def log_letters(self) -> None:
        by: dict[str, int] = {}
        for letter in self.letters:
            by[letter.transform] = by.get(letter.transform, 0) + 1
        for name, n in by.items():
            self.logger.warning("%s: %d event(s) of batch %d sent to the dead-letter sink",
                                name, n, self.place.batch_id)


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
