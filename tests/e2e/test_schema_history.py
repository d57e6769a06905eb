"""A pipeline that lags behind DDL decodes every row with the columns it had when written.

The pipeline is stopped while columns are added, dropped, reordered, retyped and
renamed, and tables renamed, swapped (as online-schema-change tools do at cut-over),
truncated, created and dropped; it is restarted in the middle of that history and at
the end, and every row it captured must equal what the test wrote, by column name.
Run at every ``binlog_row_metadata`` setting MariaDB has.
"""

from __future__ import annotations

import json

import pytest

from mysqlcdc.schema.history import SchemaHistory

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


class Writer:
    """Writes rows and remembers, per (table, id), the row image the binlog must give back."""

    def __init__(self, mariadb, db: str) -> None:
        self.mariadb, self.db = mariadb, db
        self.expected: dict[tuple[str, int], dict] = {}
        self.ddl: list[str] = []

    def insert(self, table: str, row: dict, *, image: dict | None = None) -> None:
        cols = ", ".join(f"`{c}`" for c in row)
        vals = ", ".join(_literal(v) for v in row.values())
        self.mariadb.sql(f"INSERT INTO `{table}` ({cols}) VALUES ({vals})", db=self.db)
        self.expected[(table, row["id"])] = image if image is not None else row

    def run(self, *statements: str) -> None:
        self.mariadb.sql(*statements, db=self.db)
        self.ddl.extend(statements)


def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)



def _catch_up(spark, options: dict, out: str, checkpoint: str) -> None:
    df = spark.readStream.format("mysqlcdc").options(**options).load()
    query = (df.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds")
             .start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


@pytest.fixture(params=["NO_LOG", "MINIMAL", "FULL"])
def row_metadata(request, mariadb):
    mariadb.sql(f"SET GLOBAL binlog_row_metadata = {request.param}")
    yield request.param
    mariadb.sql("SET GLOBAL binlog_row_metadata = NO_LOG")


def test_lagging_pipeline_decodes_rows_with_the_columns_they_had(
        spark, mariadb, fresh_db, source_options, tmp_path, row_metadata):
    w = Writer(mariadb, fresh_db)
    w.run("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(20))",
          "CREATE TABLE s1 (id INT PRIMARY KEY, x VARCHAR(10))",
          "CREATE TABLE s2 (id INT PRIMARY KEY, y INT, z INT)",
          "CREATE TABLE r (id INT PRIMARY KEY, v INT)")
    out, checkpoint = str(tmp_path / "changelog"), str(tmp_path / "checkpoint")
    options = source_options(startingPosition=str(binlog_position(mariadb)),
                             include=f"{fresh_db}.*",
                             maxEventsPerBatch=4, schemaHistory=str(tmp_path / "history"))
    w.insert("t", {"id": 1, "a": 1, "b": "1"})
    _catch_up(spark, options, out, checkpoint)          # history bootstrapped, one row read

    # --- the pipeline is stopped: the schema moves on without it -----------------------
    w.insert("t", {"id": 2, "a": 2, "b": "2"})
    w.run("ALTER TABLE t ADD COLUMN c DATETIME(3) AFTER a")
    w.insert("t", {"id": 3, "a": 3, "c": "2024-01-02 03:04:05.678", "b": "3"})
    w.run("ALTER TABLE t DROP COLUMN a")
    w.insert("t", {"id": 4, "c": "2024-02-29 23:59:59.999", "b": "4"})
    w.run("ALTER TABLE t MODIFY b BIGINT UNSIGNED FIRST")     # retyped and moved first
    w.insert("t", {"b": 18446744073709551615, "id": 5, "c": None})
    _catch_up(spark, options, out, checkpoint)          # restart in the middle of the history

    w.run("ALTER TABLE t CHANGE c seen DATETIME(3), ADD COLUMN d ENUM('x','y') DEFAULT 'y'")
    w.insert("t", {"b": 6, "id": 6, "seen": "2000-01-01 00:00:00.000", "d": "x"})
    w.run("RENAME TABLE r TO r2")
    w.insert("r2", {"id": 10, "v": 5})
    w.run("RENAME TABLE s1 TO s_tmp, s2 TO s1, s_tmp TO s2")  # a cut-over swap
    w.insert("s1", {"id": 20, "y": 1, "z": 2})
    w.insert("s2", {"id": 21, "x": "abc"})
    w.run("TRUNCATE TABLE r2")
    w.insert("r2", {"id": 11, "v": 6})
    w.run("CREATE TABLE n LIKE s2", "ALTER TABLE n ADD COLUMN w VARCHAR(5) FIRST")
    w.insert("n", {"w": "ww", "id": 30, "x": "n"})
    w.run("DROP TABLE n")
    _catch_up(spark, options, out, checkpoint)

    rows = spark.read.parquet(out).collect()
    inserts = {(r["table"], json.loads(r["after"])["id"]): json.loads(r["after"])
               for r in rows if r["op"] == "c"}
    assert len([r for r in rows if r["op"] == "c"]) == len(w.expected)   # each exactly once
    for key, image in w.expected.items():
        assert inserts.get(key) == image, f"{key}: captured {inserts.get(key)}, wrote {image}"
        assert list(inserts[key]) == list(image), f"{key}: column order"

    changes = sorted((r["seq"], r["op"], r["table"], r["query"]) for r in rows
                     if r["op"] in ("s", "t"))
    assert [op for _, op, _, _ in changes].count("t") == 1
    ddl_tables = [(table, query) for _, op, table, query in changes if op == "s"]
    assert ("t", "ALTER TABLE t ADD COLUMN c DATETIME(3) AFTER a") in ddl_tables
    assert ("n", "DROP TABLE `n` /* generated by server */") in ddl_tables   # as logged
    assert ("n", "CREATE TABLE n LIKE s2") in ddl_tables
    swap = [t for t, q in ddl_tables if q.startswith("RENAME TABLE s1")]
    assert sorted(swap) == sorted(["s1", "s2", "s_tmp", "s_tmp", "s1", "s2"])
    after_alter = next(json.loads(r["after"]) for r in rows if r["op"] == "s"
                       and r["query"].startswith("ALTER TABLE t MODIFY"))
    assert [c["name"] for c in after_alter["columns"]] == ["b", "id", "c"]

    history = SchemaHistory(tmp_path / "history")
    kinds = [r["what"] for r in history.timeline(fresh_db, "t")]
    assert kinds == ["bootstrap", "alter", "alter", "alter", "alter"]
