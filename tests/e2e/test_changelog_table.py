"""FlexCDC-style changelog tables: MariaDB -> Spark -> PostgreSQL / MariaDB."""

from __future__ import annotations

import pytest

from mysqlcdc.sinks.changelog_table import ChangelogTableSettings, start_changelog_table

from tests.e2e.test_backfill import own  # noqa: F401 (a fixture)
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


def test_a_table_read_again_keeps_the_sum_of_dml_type(spark, own, postgres, mariadb_target,
                                                       tmp_path, monkeypatch):  # noqa: F811
    """A backfill reads a table's rows again (here the one an ADD COLUMN ... DEFAULT
    queues, then a user's `mysqlcdc snapshot`). Its rows used to be +1 again, so
    ``SUM(dml_type)`` per key became 2 and every aggregate over the log doubled. A read
    of a key the log holds live is now 0: the row as it is (the new column's default
    included), no change."""
    import json

    import subprocess
    import sys

    from tests.e2e.test_backfill import ENV, _in_process

    monkeypatch.setenv("CLT_PG_PASSWORD", postgres.password)
    own.sql("CREATE TABLE shop.acc (id INT PRIMARY KEY, amount INT)",
            "INSERT INTO shop.acc SELECT seq, seq * 10 FROM shop.seq_1_to_40")
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"""
name: sums
source:
  host: {own.host}
  port: {own.port}
  user: {own.user}
  server_id: 7991
  tables: {{include: ["shop.*"]}}
  snapshot: {{mode: initial, chunk_rows: 15}}
spark:
  master: "local[2]"
  checkpoint: {tmp_path}/checkpoint
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog_table: {{target: postgresql, host: {postgres.host}, port: {postgres.port},
                       user: {postgres.user}, password_env: CLT_PG_PASSWORD}}
  - changelog_table: {{target: mysql, host: {mariadb_target.host}, port: {mariadb_target.port},
                       user: {mariadb_target.user}, database: clt_ledger}}
""")
    _in_process(spark, config)
    own.sql("ALTER TABLE shop.acc ADD COLUMN fee INT NOT NULL DEFAULT 3",
            "UPDATE shop.acc SET amount = amount + 1 WHERE id <= 5",
            "DELETE FROM shop.acc WHERE id BETWEEN 6 AND 8",
            "INSERT INTO shop.acc VALUES (100, 1000, 4)")
    _in_process(spark, config)
    asked = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "snapshot", str(config),
                            "shop.acc", "--where", "id <= 20"], capture_output=True, text=True,
                           env={**ENV, "CLT_PG_PASSWORD": postgres.password})
    assert asked.returncode == 0, asked.stderr
    own.sql("UPDATE shop.acc SET amount = 0 WHERE id = 9")
    _in_process(spark, config)

    want = {r[0]: (r[1], r[2]) for r in own.sql("SELECT id, amount, fee FROM shop.acc")}
    logs = {"postgresql": postgres.sql('SELECT id, amount, fee, dml_type FROM shop.acc_changelog '
                                       'ORDER BY gsn'),
            "mysql": mariadb_target.sql("SELECT id, amount, fee, dml_type FROM "
                                        "shop.acc_changelog ORDER BY gsn")}
    for kind, rows in logs.items():
        sums: dict[int, int] = {}
        amount: dict[int, int] = {}
        latest: dict[int, tuple] = {}
        for id_, amt, fee, sign in rows:
            sums[id_] = sums.get(id_, 0) + sign
            amount[id_] = amount.get(id_, 0) + sign * amt
            if sign >= 0:
                latest[id_] = (amt, fee)
        assert {k for k, n in sums.items() if n == 1} == set(want), kind
        assert all(n in (0, 1) for n in sums.values()), (kind, json.dumps(sums))
        assert {k: v for k, v in amount.items() if k in want} == \
            {k: a for k, (a, _) in want.items()}, kind          # SUM(amount * dml_type)
        assert {k: latest[k] for k in want} == want, kind       # the new column's default
        assert sum(1 for r in rows if r[3] == 0) >= 32, kind   # 32 rows read again, then 17


def test_a_snapshot_taken_while_the_table_is_written_counts_each_row_once(
        spark, own, postgres, tmp_path, monkeypatch):  # noqa: F811
    """The initial snapshot runs while a writer updates and deletes rows. The stream from
    the snapshot's start then carries changes made before a chunk read their keys (the
    log got the read first) and first changes of keys dropped from their chunk (changed
    inside its window). Those used to count their images again: SUM(dml_type) per key
    of -1 or 0 for a live key, SUM(amount * dml_type) off. Each live row now counts once."""
    import random
    import threading
    import time

    from tests.e2e.test_backfill import _in_process

    monkeypatch.setenv("CLT_PG_PASSWORD", postgres.password)
    own.sql("CREATE TABLE shop.busy (id INT PRIMARY KEY, amount INT)",
            "INSERT INTO shop.busy SELECT seq, seq FROM shop.seq_1_to_800")
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"""
name: busy
source:
  host: {own.host}
  port: {own.port}
  user: {own.user}
  server_id: 7993
  tables: {{include: ["shop.busy"]}}
  snapshot: {{mode: initial, chunk_rows: 10, chunks_per_batch: 4}}
spark:
  master: "local[2]"
  checkpoint: {tmp_path}/checkpoint
  trigger_interval: "100 milliseconds"
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog_table: {{target: postgresql, host: {postgres.host}, port: {postgres.port},
                       user: {postgres.user}, password_env: CLT_PG_PASSWORD}}
""")
    done = threading.Event()

    def write() -> None:
        pick, conn = random.Random(7), own.connect()
        conn.autocommit(True)
        try:
            with conn.cursor() as cur:
                for n in range(400):                 # about 4 s: the whole snapshot
                    i = pick.randint(1, 800)
                    cur.execute(f"DELETE FROM shop.busy WHERE id = {i}" if n % 5 == 0 else
                                f"UPDATE shop.busy SET amount = amount + 7 WHERE id = {i}")
                    time.sleep(0.01)
        finally:
            conn.close()
            done.set()
    writer = threading.Thread(target=write)
    writer.start()
    try:
        _in_process(spark, config)
    finally:
        writer.join()
    _in_process(spark, config)                        # whatever the writer did last

    want = dict(own.sql("SELECT id, amount FROM shop.busy"))
    rows = postgres.sql("SELECT id, amount, dml_type FROM shop.busy_changelog ORDER BY gsn")
    sums: dict[int, int] = {}
    amount: dict[int, int] = {}
    for id_, amt, sign in rows:
        sums[id_] = sums.get(id_, 0) + sign
        amount[id_] = amount.get(id_, 0) + sign * amt
    assert {k: n for k, n in sums.items() if n not in (0, 1)} == {}
    assert sorted(k for k, n in sums.items() if n != 0) == sorted(want)
    assert {k: a for k, a in amount.items() if k in want} == want
    assert {k: a for k, a in amount.items() if k not in want and a} == {}
    assert sum(1 for r in rows if r[2] == 0) > 0       # the writer met the snapshot
