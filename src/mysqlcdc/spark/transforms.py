"""Transforms on a streaming DataFrame of envelope rows: ``mapInArrow`` per stage.

Stage 0 of a :class:`~mysqlcdc.transforms.chain.Chain` runs in each read partition;
an ordered stage (``flatten``) runs after ``repartition(1)`` in one task that sorts the
micro-batch by ``seq`` itself (Spark refuses sorts on streams). The user's modules
travel to the executors with ``SparkContext.addPyFile`` (their package zipped, or the
single module file), so the same config runs on a cluster.

Inside a task, Spark's local properties name the micro-batch (``streaming.sql.batchId``)
and the query (``sql.streaming.queryId``, kept by the checkpoint across restarts): dead
letters and transform state are keyed by them.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator

import pyarrow as pa

from mysqlcdc.transforms.api import TaskPlace
from mysqlcdc.transforms.chain import Chain

__all__ = ["apply_chain", "ship_user_code"]

log = logging.getLogger(__name__)


def ship_user_code(spark, files: Iterable[str]) -> None:
    """Make the user's modules importable in every executor (once per file)."""
    sc = spark.sparkContext
    for path in files:
        try:
            sc.addPyFile(path)
        except Exception as err:   # noqa: BLE001 - Spark refuses a second add of one path
            if "already" not in str(err).lower():
                raise
            log.debug("%s is shipped already", path)


def apply_chain(df, chain: Chain):
    """``df`` (envelope rows, maybe with extra columns) through every stage of ``chain``."""
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
        from pyspark import TaskContext

        tc = TaskContext.get()
        batch_id = tc.getLocalProperty("streaming.sql.batchId") if tc else None
        query_id = tc.getLocalProperty("sql.streaming.queryId") if tc else None
        place = TaskPlace(pipeline=chain.pipeline, sink=chain.sink, query_id=query_id or "batch",
                          batch_id=int(batch_id) if batch_id is not None else -1,
                          partition=tc.partitionId() if tc else 0, stage=stage)
        yield from chain.run_stage(stage, batches, place, input_schema)
    return run
