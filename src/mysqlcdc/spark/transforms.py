"""Transforms on a stream of envelope rows, the Spark side.

The transforms that need no order (every one before the first ``flatten``) run inside the
source's own read tasks: the chain travels to the source as a pickled file named by the
``transformsFile`` option (written on the driver's machine, where the source's planning
process runs; the read tasks get the chain inside the pickled reader), so the rows are
transformed where they are decoded, with no extra trip from the JVM to another Python
worker and back. The source's schema then has the transforms' columns. An ordered stage
(``flatten`` and what follows it) runs after ``repartition(1)`` in one ``mapInArrow``
task that sorts the micro-batch by ``seq`` itself (Spark refuses sorts on streams).

The user's modules travel to the executors with ``SparkContext.addPyFile`` (their package
zipped, or the single module file), so the same config runs on a cluster.

Inside a task, Spark's local properties name the micro-batch (``streaming.sql.batchId``)
and the query (``sql.streaming.queryId``, kept by the checkpoint across restarts): dead
letters and transform state are keyed by them.
"""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pyarrow as pa

from mysqlcdc.envelope.model import ARROW_SCHEMA, ENVELOPE_DDL
from mysqlcdc.errors import ConfigError
from mysqlcdc.transforms.api import TaskPlace
from mysqlcdc.transforms.chain import Chain

__all__ = ["load_transformed", "load_written", "apply_chain", "ship_user_code", "read_chain", "schema_ddl",
           "run_in_task"]

log = logging.getLogger(__name__)
OPTION = "transformsFile"


def ship_user_code(spark, files: Iterable[str]) -> None:
    """Make the user's modules importable in every executor (once per file).

    The source is registered again afterwards: a Python data source's tasks get the
    py-files that were added when it was registered, and the read tasks run transforms."""
    from mysqlcdc.spark.session import register

    sc = spark.sparkContext
    added = False
    for path in files:
        if path in sc._python_includes or os.path.basename(path) in sc._python_includes:
            continue
        try:
            sc.addPyFile(path)
            added = True
        except Exception as err:   # noqa: BLE001 - Spark refuses a second add of one path
            if "already" not in str(err).lower():
                raise
            log.debug("%s is shipped already", path)
    if added:
        register(spark)


def load_transformed(spark, options: Mapping[str, str], chain: Chain | None):
    """``spark.readStream.format("mysqlcdc")`` with ``chain`` applied: its unordered head in
    the read tasks, its ordered tail (if any) in one task after them."""
    head, tail = chain.split() if chain is not None else (None, None)
    options = dict(options)
    if head is not None:
        options[OPTION] = write_chain(head)
    df = spark.readStream.format("mysqlcdc").options(**options).load()
    return apply_chain(df, tail) if tail is not None else df


def load_written(spark, options: Mapping[str, str], chain: Chain | None, writer):
    """The stream of what ``writer`` (a sink's task writer, ``spark.taskwrite``) yields once
    the source's read tasks have decoded, transformed and written the changes, and the
    Arrow schema of the changes it wrote; (None, None) when the chain has an ordered stage
    (which must see the whole batch first: the sink then writes after it)."""
    from mysqlcdc.spark.taskwrite import writer_option

    head, tail = chain.split() if chain is not None else (None, None)
    if tail is not None:
        return None, None
    options = {**options, **writer_option(writer)}
    if head is not None:
        options[OPTION] = write_chain(head)
    schema = head.schema_after(0, ARROW_SCHEMA) if head is not None else ARROW_SCHEMA
    return spark.readStream.format("mysqlcdc").options(**options).load(), schema


def write_chain(chain: Chain) -> str:
    """The chain pickled into a file of the driver's machine, named by its content (it may
    hold a hash salt: readable by this user only)."""
    from mysqlcdc.spark.taskwrite import pickle_to_file

    return pickle_to_file(chain, "chains")


def read_chain(options: Mapping[str, str]) -> Chain | None:
    """The chain a source's ``transformsFile`` option names (None without the option)."""
    path = {k.lower(): v for k, v in options.items()}.get(OPTION.lower())
    if not path:
        return None
    try:
        return pickle.loads(Path(path).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
        raise ConfigError(f"option {OPTION}: cannot read the transforms in {path}: {err}",
                          hint="Start the pipeline again: the file is written when it starts.") \
            from None


def schema_ddl(chain: Chain | None) -> str:
    """The source's schema: the envelope, plus the columns ``chain`` adds."""
    if chain is None:
        return ENVELOPE_DDL
    return Chain.spark_ddl(chain.schema_after(0, ARROW_SCHEMA))


def apply_chain(df, chain: Chain):
    """``df`` (envelope rows, maybe with extra columns) through every stage of ``chain``
    as ``mapInArrow`` steps (an ordered stage after ``repartition(1)``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    input_schema = to_arrow_schema(df.schema)
    for index, (ordered, _) in enumerate(chain.stages()):
        if ordered:
            df = df.repartition(1)
        out = chain.schema_after(index, input_schema)
        df = df.mapInArrow(_stage_runner(chain, index, input_schema), Chain.spark_ddl(out))
    return df


def _stage_runner(chain: Chain, stage: int, input_schema: pa.Schema):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from chain.run_stage(stage, batches, _place(chain, stage), input_schema)
    return run


def run_in_task(chain: Chain, stage: int,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A read task's envelope batches through ``chain``'s stage ``stage``."""
    return chain.run_stage(stage, batches, _place(chain, stage), ARROW_SCHEMA)


def _place(chain: Chain, stage: int) -> TaskPlace:
    from pyspark import TaskContext

    tc = TaskContext.get()
    batch_id = tc.getLocalProperty("streaming.sql.batchId") if tc else None
    query_id = tc.getLocalProperty("sql.streaming.queryId") if tc else None
    return TaskPlace(pipeline=chain.pipeline, sink=chain.sink, query_id=query_id or "batch",
                     batch_id=int(batch_id) if batch_id is not None else -1,
                     partition=tc.partitionId() if tc else 0, stage=stage)
