"""FlexCDC-style changelog tables: MariaDB -> Spark -> PostgreSQL / MariaDB."""

from __future__ import annotations

import pytest

from mysqlcdc.sinks.changelog_table import ChangelogTableSettings, start_changelog_table

from tests.e2e.test_mirror import target_settings
from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_changelog_tables(spark, mariadb, fresh_db, source_options, tmp_path, request, kind):
    start = str(binlog_position(mariadb))
    history = str(tmp_path / "history")
    mirror, server = target_settings(kind, request, pipeline=f"cl-{fresh_db}", history_dir=history)
    settings = ChangelogTableSettings(mirror)
    df = spark.readStream.format("mysqlcdc").options(**source_options(
        startingPosition=start, include=f"{fresh_db}.*", schemaHistory=history,
        maxEventsPerBatch=40)).load()
    query = start_changelog_table(df, settings, checkpoint=str(tmp_path / "ck"),
                                  trigger_interval="200 milliseconds")
    try:
        query.processAllAvailable()
        conn = mariadb.connect(database=fresh_db, autocommit=False)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE item (id INT UNSIGNED PRIMARY KEY, v VARCHAR(10))")
            for i in range(1, 21):
                cur.execute("INSERT INTO item VALUES (%s, %s)", (i, f"v{i}"))
                if i % 3 == 0:
                    cur.execute("UPDATE item SET v = 'u' WHERE id = %s", (i - 1,))
                if i % 5 == 0:
                    cur.execute("DELETE FROM item WHERE id = %s", (i - 2,))
                conn.commit()
            cur.execute("ALTER TABLE item ADD COLUMN w INT")
            cur.execute("UPDATE item SET w = id * 10 WHERE id > 15")
            conn.commit()
            cur.execute("TRUNCATE TABLE item")
            cur.execute("INSERT INTO item VALUES (100, 'after', 1)")
            conn.commit()
        conn.close()
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    table = f'"{fresh_db}"."item_changelog"' if kind == "postgresql" else \
        f"`{fresh_db}`.item_changelog"
    rows = server.sql(f"SELECT id, v, w, dml_type, uow_id, gsn, server_id, binlog_position "
                      f"FROM {table} ORDER BY gsn")
    gsns = [r[5] for r in rows]
    assert gsns == sorted(set(gsns)), "gsn is unique and increasing"
    inserts, updates, deletes = 20 + 1, 6 + 4, 4       # ids > 15 still live: 16, 17, 19, 20
    assert sum(1 for r in rows if r[3] == 1) == inserts + updates
    assert sum(1 for r in rows if r[3] == -1) == updates + deletes
    # the two halves of an update share their unit of work; uow ids increase with gsn
    uows = [r[4] for r in rows]
    assert uows == sorted(uows) and len(set(uows)) < len(rows)
    assert all(r[6] == 1 and ":" in r[7] for r in rows)
    assert [r[2] for r in rows if r[0] == 16 and r[3] == 1][-1] == 160
    # FlexCDC's property: the sum of dml_type per key is 1 for live rows, 0 for gone ones
    # (up to the truncate, which the log keeps as history)
    live: dict[int, int] = {}
    for r in rows:
        if r[0] != 100:
            live[r[0]] = live.get(r[0], 0) + r[3]
    before_truncate = {i for i in range(1, 21)} - {i - 2 for i in range(5, 21, 5)}
    assert {k for k, n in live.items() if n == 1} == before_truncate
    assert all(n in (0, 1) for n in live.values())


def test_changelog_table_from_pipeline_config(spark, mariadb, postgres, fresh_db, tmp_path,
                                              monkeypatch):
    """The YAML sink `changelog_table` is wired through the runner (and `mirror position`)."""
    from mysqlcdc.config.models import PipelineConfig
    from mysqlcdc.pipeline.runner import start_queries

    monkeypatch.setenv("CL_PG_PASSWORD", postgres.password)
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, v INT)")
    cfg = PipelineConfig.model_validate({
        "name": "cltable", "source": {"host": mariadb.host, "port": mariadb.port,
                                      "user": mariadb.user, "server_id": 4455,
                                      "start": str(binlog_position(mariadb)),
                                      "tables": {"include": [f"{fresh_db}.*"]}},
        "spark": {"checkpoint": str(tmp_path / "ck")},
        "sinks": [{"changelog_table": {"target": "postgresql", "host": postgres.host,
                                       "port": postgres.port, "user": postgres.user,
                                       "password_env": "CL_PG_PASSWORD", "table_suffix": "_log"}}],
    })
    (query,) = start_queries(spark, cfg)
    try:
        query.processAllAvailable()
        mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES (1, 1)",
                    f"UPDATE `{fresh_db}`.t SET v = 2 WHERE id = 1")
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert postgres.sql(f'SELECT id, v, dml_type FROM "{fresh_db}".t_log ORDER BY gsn') == [
        (1, 1, 1), (1, 1, -1), (1, 2, 1)]
    (ledger,) = postgres.sql("SELECT batch_id FROM mysqlcdc_offsets WHERE pipeline LIKE "
                             "'cltable#changelog@%'")
    assert ledger[0] >= 0
