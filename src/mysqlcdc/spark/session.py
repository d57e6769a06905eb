"""Creating a SparkSession that can run mysqlcdc, and registering the source."""

from __future__ import annotations

import os
import sys
from typing import Mapping

__all__ = ["build_session", "register"]

# Quiet, small defaults for one machine; every key can be overridden by `conf`.
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.stopTimeout": "30s",
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

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark) -> None:
    """Make ``format("mysqlcdc")`` available in this session."""
    from mysqlcdc.spark.source import MysqlcdcDataSource

    spark.dataSource.register(MysqlcdcDataSource)
