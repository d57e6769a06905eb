"""Several streaming queries of one session read the one registered mysqlcdc source (a
pipeline with several sinks runs one query per sink). Starting a query must not change
the environment map the source's read tasks all carry: Spark serializes a running
query's tasks while another query starts, and a map that grows mid-write cannot be read
back (``java.io.OptionalDataException``, the query fails)."""

from __future__ import annotations

import pytest

from mysqlcdc.spark.session import _STREAMING_RUNNER_KEYS, register

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _environment(spark):
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return manager.lookupDataSource("mysqlcdc").dataSourceCls().envVars()


def test_starting_a_query_leaves_the_sources_shared_environment_as_it_is(
        spark, mariadb, fresh_db, source_options, tmp_path):
    register(spark)                  # registered anew: a new map, settled again
    env = _environment(spark)
    before = set(env.keySet())
    assert set(_STREAMING_RUNNER_KEYS) <= before
    start = str(binlog_position(mariadb))
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)",
                db=fresh_db)
    queries = []
    first_id = int(source_options()["serverId"])
    for i in range(2):              # two at once, as a pipeline with two sinks starts them
        df = spark.readStream.format("mysqlcdc").options(**source_options(
            startingPosition=start, include=f"{fresh_db}.*", serverId=first_id + 5 * i)).load()
        queries.append(df.writeStream.format("parquet").option("path", str(tmp_path / f"o{i}"))
                       .option("checkpointLocation", str(tmp_path / f"c{i}"))
                       .trigger(availableNow=True).start())
    try:
        for query in queries:
            assert query.awaitTermination(300), "availableNow should end by itself"
            assert query.exception() is None
    finally:
        for query in queries:
            query.stop()
    # the runner of each query put its keys: values replaced, no key added
    assert set(_environment(spark).keySet()) == before
    for i in range(2):
        rows = spark.read.parquet(str(tmp_path / f"o{i}")).where("op = 'c'").count()
        assert rows == 2
