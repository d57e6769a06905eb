"""Which sinks keep their rows out of the JVM, and what follows from it: the JVM's
compilers (decision 22) and the default micro-batch size."""

from __future__ import annotations

import pytest

from mysqlcdc.config import load_pipeline_from_dict
from mysqlcdc.pipeline.runner import jit_mode, source_options, writes_in_tasks
from mysqlcdc.spark.session import QUICK_JIT, with_jit

pytestmark = pytest.mark.unit


def _cfg(tmp_path, *sinks, parallelism: int = 1, transforms=(), **source):
    return load_pipeline_from_dict({
        "name": "jit", "source": {"host": "127.0.0.1", "user": "cdc", "server_id": 77,
                                  "parallelism": parallelism, **source},
        "spark": {"checkpoint": str(tmp_path / "ck")}, "transforms": list(transforms),
        "sinks": list(sinks)}, base_dir=tmp_path)


CHANGELOG = {"changelog": {"path": "./changelog"}}
KAFKA = {"kafka": {"bootstrap_servers": "127.0.0.1:9092"}}


def test_local_changelog_and_kafka_are_written_by_the_read_tasks(tmp_path):
    cfg = _cfg(tmp_path, CHANGELOG, KAFKA)
    assert [writes_in_tasks(cfg, i) for i in range(2)] == [True, True]
    assert jit_mode(cfg) == "quick"
    assert [source_options(cfg, i)["maxEventsPerBatch"] for i in range(2)] == ["500000"] * 2


@pytest.mark.parametrize("why", ["remote changelog", "console", "kafka slices", "flatten"])
def test_rows_that_meet_in_the_jvm_keep_both_compilers_and_small_batches(tmp_path, why):
    sinks = {"remote changelog": [{"changelog": {"path": "s3a://bucket/changelog"}}],
             "console": [CHANGELOG, {"console": {}}],
             "kafka slices": [KAFKA], "flatten": [CHANGELOG]}[why]
    flatten = [{"flatten": {"table": "shop.orders", "joins": [
        {"column": "customer_id", "table": "shop.customers", "key": "id"}]}}]
    cfg = _cfg(tmp_path, *sinks, parallelism=2 if why == "kafka slices" else 1,
               transforms=flatten if why == "flatten" else ())
    assert jit_mode(cfg) == "full"
    last = len(cfg.sinks) - 1
    assert not writes_in_tasks(cfg, last)
    assert source_options(cfg, last)["maxEventsPerBatch"] == "50000"


def test_a_batch_size_set_by_the_user_holds_for_every_sink(tmp_path):
    cfg = _cfg(tmp_path, CHANGELOG, {"console": {}}, max_events_per_batch=1234)
    assert [source_options(cfg, i)["maxEventsPerBatch"] for i in range(2)] == ["1234"] * 2


def test_quick_jit_is_added_to_driver_and_executors_unless_the_user_chose_compilers():
    out = with_jit({"spark.driver.extraJavaOptions": "-Dx=1"}, "quick")
    assert out["spark.driver.extraJavaOptions"] == f"-Dx=1 {QUICK_JIT}"
    assert out["spark.executor.extraJavaOptions"] == QUICK_JIT
    own = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"}
    assert with_jit(own, "quick")["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=4"
    assert with_jit(own, "full") == own
    with pytest.raises(ValueError):
        with_jit({}, "fast")


def test_a_flattening_sinks_snapshot_reads_the_referenced_tables_first(tmp_path):
    """The sink whose chain (the pipeline's transforms, then its own) flattens gets the
    referenced tables as snapshotFirst; the other sinks' queries keep the plain order."""
    from mysqlcdc.pipeline.runner import query_options

    joins = [{"column": "customer_id", "table": "shop.customers", "key": "id"},
             {"column": "item_id", "table": "shop.items", "key": "id"},
             {"column": "payer_id", "table": "shop.customers", "key": "id"}]
    flat = {"changelog": {"path": "./flat", "transforms": [
        {"flatten": {"table": "shop.orders", "joins": joins}}]}}
    cfg = _cfg(tmp_path, CHANGELOG, flat)
    assert "snapshotFirst" not in query_options(cfg, 0)
    assert query_options(cfg, 1)["snapshotFirst"] == "shop.customers,shop.items"
