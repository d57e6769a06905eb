"""The changelog's part files written by a task and its Spark-format commit log
(sinks.changelog.files, sinks.changelog.sinklog), without Spark: Spark reading what they
write is tested in tests/e2e/test_changelog_taskwrite.py."""

from __future__ import annotations

import json
import os
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.sinks.changelog.files import (UNFINISHED_SUFFIX, PartFiles, files_schema,
                                            escape_partition_value, owner_tag,
                                            remove_unfinished)
from mysqlcdc.sinks.changelog.maintenance import committed_files, orphan_files
from mysqlcdc.sinks.changelog.sinklog import SinkLog, _derive_interval

pytestmark = pytest.mark.unit


def _batch(rows: list[tuple[str, str, int]]) -> pa.RecordBatch:
    """Envelope rows (db, table, n): ``seq`` and ``ts_ms`` from n, the rest made up."""
    n = len(rows)
    cols = {f.name: pa.nulls(n, f.type) for f in ARROW_SCHEMA}
    cols["op"] = pa.array(["c"] * n)
    cols["db"] = pa.array([r[0] for r in rows])
    cols["table"] = pa.array([r[1] for r in rows])
    cols["after"] = pa.array([json.dumps({"id": r[2], "pad": "x" * 50}) for r in rows])
    cols["key"] = pa.array([json.dumps({"id": r[2]}) for r in rows])
    cols["ts_ms"] = pa.array([1_700_000_000_000 + r[2] for r in rows], pa.int64())
    cols["seq"] = pa.array([Decimal(r[2]) for r in rows], ARROW_SCHEMA.field("seq").type)
    return pa.RecordBatch.from_arrays([cols[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


def _write(root: Path, batches, **kw) -> list[dict]:
    out = list(PartFiles(str(root), batch_id=3, **kw).write(iter(batches)))
    assert all(b.schema == files_schema() for b in out)
    return [r for b in out for r in b.to_pylist()]


def test_each_partition_value_gets_its_files_and_every_row_lands_once(tmp_path):
    rows = [("shop", "orders", i) for i in range(0, 300)] + \
           [("shop", "items", i) for i in range(300, 400)] + \
           [("crm", "orders", i) for i in range(400, 450)]
    mixed = [_batch(rows[i:i + 64]) for i in range(0, len(rows), 64)]
    files = _write(tmp_path, mixed, row_group_rows=70)
    by_part = {tuple(json.loads(f["partition_values"]).values()): f for f in files}
    assert set(by_part) == {("shop", "orders"), ("shop", "items"), ("crm", "orders")}
    assert sum(json.loads(f["stats"])["numRecords"] for f in files) == 450
    for f in files:
        path = tmp_path / f["path"]
        assert path.stat().st_size == f["size"]
        assert f["path"].startswith("db=")
        stats = json.loads(f["stats"])
        table = pq.read_table(path)
        assert "db" not in table.column_names and "table" not in table.column_names
        assert table.num_rows == stats["numRecords"]
        ts = table.column("ts_ms").to_pylist()
        assert stats["minValues"]["ts_ms"] == min(ts) and stats["maxValues"]["ts_ms"] == max(ts)
    orders = pq.read_table(tmp_path / by_part[("shop", "orders")]["path"])
    assert orders.column("seq").to_pylist() == [Decimal(i) for i in range(300)]   # in order
    assert pq.ParquetFile(tmp_path / by_part[("shop", "orders")]["path"]).num_row_groups >= 3
    # a plain reader of the folder sees the partition columns again, every row once
    whole = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(whole.column("seq").to_pylist()) == [Decimal(i) for i in range(450)]


def test_memory_budget_writes_the_largest_buffer_before_the_row_group_is_full(tmp_path):
    rows = [("db", "t", i) for i in range(2000)]
    files = _write(tmp_path, [_batch(rows[i:i + 100]) for i in range(0, 2000, 100)],
                   row_group_rows=1_000_000, buffer_bytes=20_000)
    (f,) = files
    groups = pq.ParquetFile(tmp_path / f["path"]).num_row_groups
    assert groups > 5                      # written as the budget filled, not at the end
    assert pq.read_table(tmp_path / f["path"]).num_rows == 2000


def test_no_rows_no_files(tmp_path):
    assert _write(tmp_path, [_batch([])]) == []
    assert not any(tmp_path.iterdir())


def test_unpartitioned_and_null_and_odd_partition_values(tmp_path):
    plain = _write(tmp_path / "plain", [_batch([("a", "b", 1)])], partition_by=())
    assert "/" not in plain[0]["path"]
    assert pq.read_table(tmp_path / "plain" / plain[0]["path"]).column_names == ARROW_SCHEMA.names
    odd = _write(tmp_path / "odd", [_batch([("we=ird/db", "t:1", 1)])])
    assert odd[0]["path"].startswith("db=we%3Dird%2Fdb/table=t%3A1/")
    assert json.loads(odd[0]["partition_values"]) == {"db": "we=ird/db", "table": "t:1"}
    assert escape_partition_value(None) == "__HIVE_DEFAULT_PARTITION__"
    assert escape_partition_value("ünï code") == "ünï code"


def test_a_failing_input_closes_the_files_and_fails(tmp_path):
    def broken():
        yield _batch([("db", "t", 1)])
        raise RuntimeError("decoder broke")

    with pytest.raises(RuntimeError, match="decoder broke"):
        list(PartFiles(str(tmp_path), batch_id=1, row_group_rows=1).write(broken()))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []   # nothing left behind


def test_a_file_being_written_is_hidden_until_the_task_closes_it(tmp_path):
    rows = [("db", "t", i) for i in range(300)]
    seen: list[list[str]] = []

    def batches():
        for i in range(0, 300, 100):
            yield _batch(rows[i:i + 100])
            seen.append(sorted(p.name for p in tmp_path.rglob("*") if p.is_file()))

    files = _write(tmp_path, batches(), row_group_rows=100, owner="tag1")
    # while the task runs: only the hidden name, which readers of the folder pass over
    assert seen[-1] and all(n.startswith(".part-") and n.endswith(f".tag1{UNFINISHED_SUFFIX}")
                            for n in seen[-1])
    assert ds.dataset(tmp_path, format="parquet").files == [str(tmp_path / files[0]["path"])]
    (name,) = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert name == Path(files[0]["path"]).name and not name.startswith(".")
    assert pq.read_table(tmp_path / files[0]["path"]).num_rows == 300


def test_the_sink_removes_what_its_killed_tasks_left_unfinished(tmp_path):
    kept = _files(tmp_path, 0, 2)
    part = (tmp_path / kept[0]["path"]).parent
    mine, theirs = owner_tag("shop", 0), owner_tag("shop", 1)
    assert mine != theirs and mine == owner_tag("shop", 0)
    name = ".part-00001-0000000001-abc-0000.c000.snappy.parquet"
    (part / f"{name}.{mine}{UNFINISHED_SUFFIX}").write_bytes(b"PAR1")
    (part / f"{name}.{theirs}{UNFINISHED_SUFFIX}").write_bytes(b"PAR1")   # another writer's
    (part / ".other-hidden").write_bytes(b"x")
    assert remove_unfinished(str(tmp_path), mine) == 1
    assert sorted(p.name for p in part.iterdir()) == sorted(
        [".other-hidden", f"{name}.{theirs}{UNFINISHED_SUFFIX}", Path(kept[0]["path"]).name])
    # a vacuum while writers run: only what was last written before the cutoff
    assert remove_unfinished(str(tmp_path), older_than=time.time() - 3600) == 0
    assert remove_unfinished(str(tmp_path), older_than=time.time() + 1) == 1
    assert sorted(p.name for p in part.iterdir()) == [".other-hidden", Path(kept[0]["path"]).name]


def _files(root: Path, batch_id: int, n: int) -> list[dict]:
    return _write(root, [_batch([("db", "t", batch_id * 1000 + i) for i in range(n)])])


def test_sink_log_commits_batches_as_spark_writes_them_and_compacts(tmp_path):
    log = SinkLog(tmp_path)
    assert log.latest() == -1
    listed = []
    for batch_id in range(12):
        files = _files(tmp_path, batch_id, 3)
        listed += [str((tmp_path / f["path"]).resolve()) for f in files]
        assert log.add(batch_id, files)
    assert not log.add(11, _files(tmp_path, 11, 1))      # a replayed batch: skipped
    meta = tmp_path / "_spark_metadata"
    names = sorted(p.name for p in meta.iterdir())
    assert "9.compact" in names and "10" in names and "11" in names
    lines = (meta / "9.compact").read_text().splitlines()
    assert lines[0] == "v1" and len(lines) == 11           # batches 0-9, one file each
    entry = json.loads(lines[1])
    assert entry["action"] == "add" and entry["path"].startswith("file:///")
    assert {str(p) for p in committed_files(tmp_path)} == set(listed)
    # the file of the replay that was skipped is an orphan
    assert len(orphan_files(tmp_path)) == 1


def test_a_new_changelog_gets_its_empty_log_before_any_file(tmp_path):
    fresh = tmp_path / "fresh"
    assert SinkLog(fresh).begin() and (fresh / "_spark_metadata").is_dir()
    assert not SinkLog(fresh).begin()                     # already there
    assert SinkLog(fresh).latest() == -1
    empty = tmp_path / "empty"
    (empty / "db=a" / ".hidden").mkdir(parents=True)
    (empty / "db=a" / ".part.crc").write_bytes(b"x")
    assert SinkLog(empty).begin()                         # hidden files are not data
    foreign = tmp_path / "foreign"
    _files(foreign, 0, 1)
    assert not SinkLog(foreign).begin()                   # not known to be a changelog
    assert not (foreign / "_spark_metadata").exists()


def test_sink_log_retention_leaves_old_files_out_of_a_compaction(tmp_path):
    log = SinkLog(tmp_path, retention_s=3600)
    old = _files(tmp_path, 0, 1)
    old[0]["modification_time"] = int((time.time() - 7200) * 1000)
    log.add(0, old)
    for batch_id in range(1, 10):
        log.add(batch_id, _files(tmp_path, batch_id, 1))
    live = committed_files(tmp_path)
    assert len(live) == 9
    assert Path(os.path.realpath(tmp_path / old[0]["path"])) not in live


def test_sink_log_follows_the_interval_an_existing_log_has():
    assert _derive_interval(10, 5) == 5
    assert _derive_interval(10, 10) == 10
    assert _derive_interval(10, 30) == 10
    assert _derive_interval(10, 12) == 12        # no divisor >= 10 below half: itself
    assert _derive_interval(10, 44) == 11


def test_sink_log_goes_on_from_an_existing_compaction(tmp_path):
    meta = tmp_path / "_spark_metadata"
    meta.mkdir()
    (meta / "4.compact").write_text("v1")
    (meta / "9.compact").write_text("v1")
    log = SinkLog(tmp_path)
    assert log.interval == 5 and log.latest() == 9
    for batch_id in range(10, 15):
        log.add(batch_id, [])
    assert (meta / "14.compact").exists() and (meta / "13").exists()


def test_progress_counts_the_changes_a_task_writer_wrote():
    from mysqlcdc.spark.taskwrite import note_written, with_written_rows

    progress = {"id": "q-files", "batchId": 4, "numInputRows": 2,
                "inputRowsPerSecond": 10.0, "processedRowsPerSecond": 4.0,
                "durationMs": {"triggerExecution": 500}}
    assert with_written_rows(progress) == progress          # nothing noted: unchanged
    note_written("q-files", 4, 1000)
    shown = with_written_rows(progress)
    assert shown["numInputRows"] == 1000
    assert shown["processedRowsPerSecond"] == pytest.approx(2000.0)
    assert shown["inputRowsPerSecond"] == pytest.approx(5000.0)
    assert with_written_rows({**progress, "batchId": 5}) == {**progress, "batchId": 5}
    note_written("q-files", 6, 300)                          # a batch that wrote no file row
    empty = with_written_rows({**progress, "batchId": 6, "numInputRows": 0,
                               "processedRowsPerSecond": 0.0, "inputRowsPerSecond": 0.0})
    assert empty["numInputRows"] == 300 and empty["processedRowsPerSecond"] == 600.0
    note_written(None, 7, 5)                                 # no query id: nothing kept
    assert with_written_rows({"id": "None", "batchId": 7}) == {"id": "None", "batchId": 7}


def test_sink_log_deletes_entries_before_the_previous_compaction_after_the_delay(tmp_path):
    log = SinkLog(tmp_path)
    meta = tmp_path / "_spark_metadata"
    for batch_id in range(20):
        log.add(batch_id, [])
        if batch_id == 9:                      # the first ten entries: long written
            for entry in meta.iterdir():
                os.utime(entry, (time.time() - 3600, time.time() - 3600))
    names = {p.name for p in meta.iterdir()}
    assert "19.compact" in names and "9.compact" in names   # the previous one stays
    assert not any(n in names for n in map(str, range(9)))  # the batches before it go
    log.add(20, _files(tmp_path, 20, 2))
    assert log.latest() == 20 and len(committed_files(tmp_path)) == 1   # one file, 2 rows


def test_columns_that_never_repeat_are_written_without_a_dictionary(tmp_path):
    rows = [("shop", "orders", i) for i in range(500)]
    [f] = _write(tmp_path, [_batch(rows)])
    meta = pq.ParquetFile(tmp_path / f["path"]).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings
                 for i in range(meta.num_columns)}
    for name in ("after", "key", "seq"):
        assert "RLE_DICTIONARY" not in encodings[name], name
    for name in ("op", "ts_ms"):
        assert "RLE_DICTIONARY" in encodings[name], name
    table = pq.read_table(tmp_path / f["path"])
    assert table.column("after").to_pylist() == [r.as_py() for r in _batch(rows).column("after")]


def test_a_place_the_files_cannot_be_written_is_a_named_error(tmp_path):
    """The file system's own refusal (here: the changelog's root is under a file, not a
    folder), named with the place and the system's reason; nothing is left half written."""
    from mysqlcdc.errors import StorageWriteError

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    spec = PartFiles(str(blocker / "changelog"), batch_id=0)
    with pytest.raises(StorageWriteError) as info:
        list(spec.write(iter([_batch([("shop", "orders", 1)])])))
    assert info.value.code == "STORAGE_WRITE_FAILED"
    assert str(blocker / "changelog") in info.value.message
    assert "Not a directory" in info.value.message and "run the pipeline again" in info.value.hint


def test_a_full_disk_in_a_failed_querys_text_is_named():
    """What Spark reports when the checkpoint's file system is full (Java) or a task's
    write was refused (Python), as the one-line error the CLI prints."""
    from mysqlcdc.errors import storage_failure

    java = ("[STREAM_FAILED] Query  terminated with exception: java.io.IOException: No space "
            "left on device SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: x")
    err = storage_failure(java)
    assert err is not None and err.code == "STORAGE_WRITE_FAILED"
    assert "no space left on device" in err.message and "java.io.IOException" in err.message
    assert storage_failure("OSError: [Errno 30] Read-only file system: '/data'") is not None
    assert storage_failure("java.lang.IllegalStateException: something else") is None
