"""Kafka sink: change events to Kafka, per-key ordered, nothing lost (see docs in README).

``start_kafka(df, settings, checkpoint=...)`` starts the streaming query;
``df.writeStream.format("mysqlcdc-kafka")`` works directly once :func:`register`
has run (``mysqlcdc.spark.build_session`` does not register it; ``start_kafka`` does).
"""

from __future__ import annotations

from mysqlcdc.sinks.kafka.settings import KafkaSettings, from_sink_config

__all__ = ["KafkaSettings", "CommitRecord", "start_kafka", "register", "read_last_commit",
           "from_sink_config", "task_writer", "FORMAT"]

FORMAT = "mysqlcdc-kafka"


def __getattr__(name: str):
    # the commit log's module brings pyarrow (through the checkpoint's offsets): a process
    # that only unpickles the task writer to ask for its schema does without it
    if name in ("CommitRecord", "read_last_commit"):
        from mysqlcdc.sinks.kafka import commitlog

        return getattr(commitlog, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark) -> None:
    """Make ``format("mysqlcdc-kafka")`` available in this session."""
    from mysqlcdc.sinks.kafka.writer import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)


def task_writer(settings: KafkaSettings):
    """The writer the source's read tasks run to publish themselves (DESIGN.md decision
    20, amended; :mod:`.tasks`)."""
    from mysqlcdc.sinks.kafka.taskwriter import TaskPublisher

    return TaskPublisher(settings)


def start_kafka(df, settings: KafkaSettings, *, checkpoint: str,
                trigger_interval: str = "1 second", write_tasks: int | None = None,
                name: str | None = None, available_now: bool = False, written: bool = False):
    """Start the query publishing ``df`` (envelope rows) to Kafka.

    ``written``: ``df`` is what :func:`task_writer` yields in the read tasks, which
    published their rows; the query publishes what they left and the commit records.

    Rows are spread over ``write_tasks`` tasks by ``db``, ``table`` and ``key`` (default
    ``spark.sql.shuffle.partitions``), so every change of a key is published by one task,
    which orders its rows by ``seq`` in bounded memory (``settings.sort_memory_mb``; a larger
    micro-batch spills to local disk). ``available_now``: publish what is there, then stop.
    The ``debezium`` format reads table definitions from ``settings.history_dir``, the
    folder given to the source as its ``schemaHistory`` option.
    """
    register(df.sparkSession)
    tasks = write_tasks or int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    if written:
        from dataclasses import replace

        from mysqlcdc.sinks.kafka.writer import task_batch_committer
        from mysqlcdc.spark.stopping import quiet_on_stop

        writer = (df.writeStream.foreachBatch(quiet_on_stop(task_batch_committer(
            replace(settings, checkpoint=checkpoint), tasks)))
            .option("checkpointLocation", checkpoint))
        writer = (writer.trigger(availableNow=True) if available_now
                  else writer.trigger(processingTime=trigger_interval))
        return (writer.queryName(name) if name else writer).start()
    if settings.transaction_orders:
        from mysqlcdc.sinks.kafka.txnorder import with_transaction_orders

        df = with_transaction_orders(df)     # before the shuffle: partitions hold whole txns
    # one write task needs no shuffle: the read tasks' rows go to it as they are (one
    # Spark stage per batch instead of two, the low-latency setting's choice; the
    # transaction orders above are still numbered per read partition)
    spread = df.coalesce(1) if tasks == 1 else df.repartition(tasks, "db", "table", "key")
    writer = (
        spread.writeStream.format(FORMAT)
        .options(**settings.to_options())
        .option("checkpointLocation", checkpoint)
    )
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=trigger_interval))
    if name:
        writer = writer.queryName(name)
    return writer.start()
