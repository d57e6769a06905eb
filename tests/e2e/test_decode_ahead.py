"""The decode-ahead (DESIGN.md decision 24) against a real MariaDB and Spark.

A new pipeline with a backlog: its batches are decoded ahead by a process of their own,
adopted by the query, and read from their spool files; the changelog holds exactly what
the same pipeline writes without the decode-ahead, change for change. A decode-ahead
that dies mid-run costs nothing but speed."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _workload(mariadb, db: str, transactions: int = 300) -> int:
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)")
    statements = []
    for i in range(1, transactions + 1):
        statements.append(f"INSERT INTO `{db}`.t VALUES ({i}, 'v{i}', {i * 3})")
        if i % 4 == 0:
            statements.append(f"UPDATE `{db}`.t SET v = 'u{i}', n = n + 1 WHERE id = {i - 1}")
        if i % 7 == 0:
            statements.append(f"DELETE FROM `{db}`.t WHERE id = {i - 3}")
    mariadb.sql(*statements)
    return len(statements) + 1           # and the CREATE's schema change record


def _more(mariadb, db: str) -> int:
    """Changes after the first run: updates of rows that exist, and inserts."""
    deleted = {i - 3 for i in range(1, 301) if i % 7 == 0}
    statements = [f"UPDATE `{db}`.t SET n = n * 2 WHERE id = {i}"
                  for i in range(2, 300, 2) if i not in deleted]
    statements += [f"INSERT INTO `{db}`.t VALUES ({1000 + i}, 'w{i}', {i})" for i in range(200)]
    mariadb.sql(*statements)
    return len(statements)


def _config(mariadb, db: str, tmp_path: Path, name: str, start, server_id: int,
            events: int = 150):
    from mysqlcdc.config import load_pipeline_from_dict

    return load_pipeline_from_dict({
        "name": f"{db.replace('_', '-')}-{name}",
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": server_id, "start": str(start),
                   "max_events_per_batch": events, "tables": {"include": [f"{db}.*"]}},
        "spark": {"master": "local[2]", "checkpoint": str(tmp_path / name / "ck"),
                  "trigger_interval": "0 seconds"},
        "sinks": [{"changelog": {"path": str(tmp_path / name / "changelog")}}],
    })


def _rows(path: Path) -> list[tuple]:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(
        columns=["seq", "op", "file", "pos", "row", "before", "after", "key"])
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _counts(caplog) -> dict[str, int]:
    import re

    for record in caplog.records:
        m = re.search(r"(\d+) batches decoded ahead, (\d+) adopted by the query, (\d+) read"
                      r".*; (\d+) decoded in slices", record.getMessage())
        if m:
            return dict(zip(("decoded", "adopted", "read", "sliced"), map(int, m.groups())))
    return {}


def _read_to_the_end(caplog) -> bool:
    """The decode-ahead stopped because the backlog was read, not overtaken by the query."""
    return any("decode-ahead of sink" in r.getMessage() and
               r.getMessage().endswith("the backlog is read (cap)") for r in caplog.records)


def test_a_backlog_is_decoded_ahead_and_written_as_without(spark, mariadb, fresh_db,
                                                           tmp_path, caplog, monkeypatch):
    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    changes = _workload(mariadb, fresh_db)
    caplog.set_level(logging.INFO, logger="mysqlcdc.pipeline.ahead")
    run_pipeline(_config(mariadb, fresh_db, tmp_path, "ahead", start, 5310), until_idle=True,
                 spark=spark)
    counts = _counts(caplog)
    # several batches of 150 events: the first ones decoded while nothing else ran, the
    # query adopted them and its read task read them from their spool; all but the first:
    # it ends at the CREATE TABLE, which the decode-ahead applied to the history before the
    # query planned that batch's task, so the task's history differs and it decodes itself
    assert counts.get("decoded", 0) >= 5, counts
    assert counts["adopted"] == counts["decoded"], counts
    assert counts["adopted"] - 1 <= counts["read"] <= counts["adopted"], counts
    assert _read_to_the_end(caplog), [r.getMessage() for r in caplog.records]
    assert not (tmp_path / "ahead" / "ck" / "0-changelog" / "mysqlcdc-schema" / "ahead").exists()

    # stopped cleanly, a backlog again: the resumed pipeline decodes ahead from where its
    # checkpoint ends
    changes += _more(mariadb, fresh_db)
    caplog.clear()
    run_pipeline(_config(mariadb, fresh_db, tmp_path, "ahead", start, 5310), until_idle=True,
                 spark=spark)
    counts = _counts(caplog)
    assert counts.get("decoded", 0) >= 3, counts
    assert counts["adopted"] == counts["decoded"] and counts["read"] == counts["adopted"], counts
    assert _read_to_the_end(caplog), [r.getMessage() for r in caplog.records]

    monkeypatch.setenv("MYSQLCDC_DECODE_AHEAD", "0")
    caplog.clear()
    run_pipeline(_config(mariadb, fresh_db, tmp_path, "plain", start, 5320), until_idle=True,
                 spark=spark)
    assert _counts(caplog) == {}
    ahead, plain = _rows(tmp_path / "ahead" / "changelog"), _rows(tmp_path / "plain" / "changelog")
    assert len(ahead) == changes and len({r[0] for r in ahead}) == changes
    assert ahead == plain


def test_a_decode_ahead_killed_mid_run_costs_only_speed(spark, mariadb, fresh_db, tmp_path,
                                                        caplog):
    """SIGKILL the decode-ahead while it works: the query decodes what it had not adopted
    (or was waiting for) itself, and every change arrives once."""
    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    changes = _workload(mariadb, fresh_db, transactions=600)
    cfg = _config(mariadb, fresh_db, tmp_path, "killed", start, 5330)
    folder = tmp_path / "killed" / "ck" / "0-changelog" / "mysqlcdc-schema" / "ahead"
    killed: list[int] = []

    def kill_when_it_has_decoded() -> None:
        from mysqlcdc.spark.ahead import Ledger

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = Ledger(folder)._state() or {}
            if state.get("decoded", 0) >= 1 and not state.get("over"):
                os.kill(int(state["pid"]), signal.SIGKILL)
                killed.append(int(state["pid"]))
                return
            time.sleep(0.005)

    caplog.set_level(logging.INFO, logger="mysqlcdc.pipeline.ahead")
    killer = threading.Thread(target=kill_when_it_has_decoded, daemon=True)
    killer.start()
    run_pipeline(cfg, until_idle=True, spark=spark)
    killer.join(timeout=5)
    assert killed, "the decode-ahead was never seen working"
    counts = _counts(caplog)
    assert counts["decoded"] >= 1 and counts["read"] <= counts["adopted"], counts
    rows = _rows(tmp_path / "killed" / "changelog")
    assert len(rows) == changes and len({r[0] for r in rows}) == changes


def test_batches_decoded_in_slices_at_once_are_written_as_without(spark, mariadb, fresh_db,
                                                                  tmp_path, caplog,
                                                                  monkeypatch):
    """Batches of several MB are cut in two slices, decoded at once by the decode-ahead and
    a helper process (each from its slice's start, passing over the events before it); the
    read task reads both spools as one batch, and the query plans each next batch from the
    record the slices' records make. The changelog is that of the plain pipeline."""
    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, v VARCHAR(2000), n BIGINT)")
    statements = [f"INSERT INTO `{fresh_db}`.t VALUES ({i}, REPEAT('{i % 10}', 1500), {i})"
                  for i in range(1, 4001)]
    statements += [f"UPDATE `{fresh_db}`.t SET n = -n WHERE id = {i}" for i in range(1, 4001, 5)]
    statements += [f"DELETE FROM `{fresh_db}`.t WHERE id = {i}" for i in range(3, 4001, 11)]
    mariadb.sql(*statements)
    changes = len(statements) + 1
    monkeypatch.setenv("MYSQLCDC_AHEAD_SLICES", "2")
    caplog.set_level(logging.INFO, logger="mysqlcdc.pipeline.ahead")
    run_pipeline(_config(mariadb, fresh_db, tmp_path, "sliced", start, 5340, events=8000),
                 until_idle=True, spark=spark)
    counts = _counts(caplog)
    assert counts.get("sliced", 0) >= 2, counts
    assert _read_to_the_end(caplog), [r.getMessage() for r in caplog.records]
    assert counts["adopted"] == counts["decoded"], counts
    assert counts["adopted"] - 1 <= counts["read"] <= counts["adopted"], counts

    monkeypatch.setenv("MYSQLCDC_DECODE_AHEAD", "0")
    run_pipeline(_config(mariadb, fresh_db, tmp_path, "plain", start, 5350, events=8000),
                 until_idle=True, spark=spark)
    sliced = _rows(tmp_path / "sliced" / "changelog")
    plain = _rows(tmp_path / "plain" / "changelog")
    assert len(sliced) == changes and len({r[0] for r in sliced}) == changes
    assert sliced == plain
