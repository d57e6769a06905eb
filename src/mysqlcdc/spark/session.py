"""Creating a SparkSession that can run mysqlcdc, and registering the source."""

from __future__ import annotations

import os
import sys
from typing import Mapping

__all__ = ["build_session", "register", "quiet_failures"]

# Quiet, small defaults for one machine; every key can be overridden by `conf`.
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.stopTimeout": "30s",
    # a partitioned file sink (the changelog) writes each partition's file as rows come
    # instead of sorting the whole task's rows by partition first (memory, CPU)
    "spark.sql.maxConcurrentOutputFileWriters": "64",
}


def build_session(master: str = "local[*]", app_name: str = "mysqlcdc",
                  conf: Mapping[str, str] | None = None):
    """Get or create a SparkSession with the mysqlcdc source registered.

    Python workers must run this interpreter (it has pyarrow and mysqlcdc), so
    PYSPARK_PYTHON is pinned to it before the JVM starts.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # stay on loopback
    from pyspark.sql import SparkSession

    from mysqlcdc.spark import warmstart

    settings = {**DEFAULT_CONF, **(conf or {})}
    cache = warmstart.cache_dir() if warmstart.enabled() else None
    if cache is not None:
        home = warmstart.spark_home(cache)
        if home is not None:
            os.environ["SPARK_HOME"] = str(home)
        options = warmstart.java_options(cache, str(home) if home else None,
                                         settings.get(warmstart.JAVA_OPTIONS, ""))
        if options:
            settings[warmstart.JAVA_OPTIONS] = options
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if cache is not None:
        warmstart.after_start(spark)
    spark.sparkContext.setLogLevel("ERROR")
    # py4j's DEBUG log has every call into the JVM with its arguments, among them the
    # source's password option: never below INFO, whatever the root logger says
    import logging

    bridge = logging.getLogger("py4j")
    if bridge.level == logging.NOTSET or bridge.level < logging.INFO:
        bridge.setLevel(max(logging.INFO, logging.getLogger().getEffectiveLevel()))
    register(spark)
    return spark


# Loggers that print a failed query's or task's whole Java and Python stack to stderr.
# The CLI names the mysqlcdc error inside in one line; --verbose keeps these.
_FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.sql.execution.datasources.v2",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.api.python",
    # "Aborting task" with the task's stack, from a file writer with concurrent writers
    "org.apache.spark.util.Utils",
)


def quiet_failures(spark) -> None:
    """Silence the loggers that dump a failed query's stack (see ``_FAILURE_LOGGERS``), and
    py4j's report of an exception in a ``foreachBatch`` function (the query fails with it;
    the caller names it)."""
    import logging

    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:   # noqa: BLE001 - only cosmetics; never fail a run for it
        pass


def register(spark) -> None:
    """Make ``format("mysqlcdc")`` available in this session."""
    from mysqlcdc.spark.source import MysqlcdcDataSource

    spark.dataSource.register(MysqlcdcDataSource)
