"""The Spark adapter: the only package that imports pyspark."""

from mysqlcdc.spark.session import build_session, register

__all__ = ["build_session", "register"]
