"""The Kafka sink's task writer, as pickled into the source's read tasks (DESIGN.md
decision 20, amended for Kafka; :mod:`.tasks` says what it does).

The process where Spark creates the source unpickles it only to ask for its schema
(``ddl``): this module imports nothing heavy, and ``write`` imports the publishing code
(pyarrow, the formats, the producer) where it runs, in the read task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from mysqlcdc.sinks.kafka.settings import KafkaSettings

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["TASK_DDL", "TaskPublisher"]

TASK_DDL = ("topic STRING, key BINARY, value BINARY, headers BINARY, seq DECIMAL(38,0), "
            "tombstone BOOLEAN, summary BINARY")


@dataclass(frozen=True)
class TaskPublisher:
    """The Kafka sink's task writer: ``write`` runs in each read task after the transforms."""

    settings: KafkaSettings
    keeps_key_order = True          # the source says whether a task shares keys

    @property
    def ddl(self) -> str:
        return TASK_DDL

    def write(self, batches: Iterator[pa.RecordBatch],
              shares_keys: bool = False) -> Iterator[pa.RecordBatch]:
        from mysqlcdc.sinks.kafka.tasks import publish

        return publish(self.settings, batches, shares_keys)
