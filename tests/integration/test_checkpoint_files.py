"""A pipeline's queries write a local checkpoint through Hadoop's FileSystem
(``spark.session.plain_local_checkpoints``): on a local disk without Hadoop's native
library, FileContext's renames start a ``readlink`` process each. A remote checkpoint
keeps Spark's default, and so does a manager the user chose. A query checkpointed the
plain way stops and resumes where it was."""

from __future__ import annotations

import pytest

from mysqlcdc.spark.session import (CHECKPOINT_MANAGER, PLAIN_CHECKPOINT_MANAGER,
                                    plain_local_checkpoints)

pytestmark = pytest.mark.integration


@pytest.fixture
def clean_conf(spark):
    before = spark.conf.get(CHECKPOINT_MANAGER, None)
    spark.conf.unset(CHECKPOINT_MANAGER)
    yield spark
    if before:
        spark.conf.set(CHECKPOINT_MANAGER, before)
    else:
        spark.conf.unset(CHECKPOINT_MANAGER)


def test_local_checkpoints_are_written_plain_remote_ones_as_spark_does(clean_conf, tmp_path):
    spark = clean_conf
    assert plain_local_checkpoints(spark, [str(tmp_path / "a"), f"file://{tmp_path}/b"])
    assert spark.conf.get(CHECKPOINT_MANAGER) == PLAIN_CHECKPOINT_MANAGER
    # a pipeline with one remote checkpoint, later in the same session: Spark's default
    assert not plain_local_checkpoints(spark, [str(tmp_path / "a"), "s3a://bucket/cp/1-kafka"])
    assert spark.conf.get(CHECKPOINT_MANAGER, None) is None
    assert not plain_local_checkpoints(spark, [])


def test_a_manager_the_user_chose_stays(clean_conf, tmp_path):
    spark = clean_conf
    theirs = ("org.apache.spark.sql.execution.streaming.checkpointing."
              "FileContextBasedCheckpointFileManager")
    spark.conf.set(CHECKPOINT_MANAGER, theirs)
    assert not plain_local_checkpoints(spark, [str(tmp_path / "a")])
    assert spark.conf.get(CHECKPOINT_MANAGER) == theirs
    assert not plain_local_checkpoints(spark, ["s3a://bucket/cp"])
    assert spark.conf.get(CHECKPOINT_MANAGER) == theirs


def test_a_query_checkpointed_plain_resumes_where_it_stopped(clean_conf, tmp_path):
    spark = clean_conf
    assert plain_local_checkpoints(spark, [str(tmp_path / "cp")])
    source = tmp_path / "in"
    source.mkdir()
    out = tmp_path / "out"

    def run() -> None:
        q = (spark.readStream.schema("n INT").json(str(source))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    (source / "1.json").write_text("\n".join(f'{{"n": {i}}}' for i in range(5)))
    run()
    (source / "2.json").write_text("\n".join(f'{{"n": {i}}}' for i in range(5, 9)))
    run()
    rows = sorted(r.n for r in spark.read.parquet(str(out)).collect())
    assert rows == list(range(9))                  # each file once: the second run resumed
    offsets = sorted(p.name for p in (tmp_path / "cp" / "offsets").iterdir()
                     if not p.name.startswith("."))
    commits = sorted(p.name for p in (tmp_path / "cp" / "commits").iterdir()
                     if not p.name.startswith("."))
    assert offsets == commits == ["0", "1"]
    # nothing half-written left behind by the temporary-file-and-rename writes
    assert not [p for p in (tmp_path / "cp").rglob("*") if p.name.endswith(".tmp")]
