"""Publishing in the read tasks: which tasks may publish alone, and what a task that
shares keys hands to the sink's write tasks instead. No broker: a task that shares keys
publishes nothing itself."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pyarrow as pa
import pytest

from mysqlcdc.capture.backfill import ResetTask
from mysqlcdc.capture.snapshot import ChunkTask
from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.sinks.kafka.publish import batch_messages
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.sinks.kafka.tasks import TaskPublisher, read_summary
from mysqlcdc.spark.source import ChunkPartition, RangePartition, _mark_shared, _written
from mysqlcdc.types import make_seq

pytestmark = pytest.mark.unit


def _chunk():
    return ChunkPartition(ChunkTask.__new__(ChunkTask))


def _range():
    return RangePartition(object())


@pytest.mark.parametrize("parts,shared", [
    ([_range()], False),                          # the batch's only task
    ([_chunk()], False),
    ([_chunk(), _chunk(), _chunk()], False),       # chunks: disjoint keys
    ([_range(), _range()], True),                  # parallel slices: a key in both
    ([_chunk(), _range()], True),                  # a backfill chunk beside the stream
    ([ChunkPartition(ResetTask.__new__(ResetTask)), _chunk()], True),   # a new snapshot's t/s
])
def test_tasks_that_may_share_a_key_are_marked(parts, shared):
    assert [p.shares_keys for p in _mark_shared(parts)] == [shared] * len(parts)


def _batch(n: int, first: int = 0) -> pa.RecordBatch:
    rows = []
    for i in range(first, first + n):
        rows.append({**dict.fromkeys(ARROW_SCHEMA.names), "op": "d" if i % 3 == 0 else "u",
                     "db": "shop", "table": "t", "before": f'{{"id":{i}}}',
                     "after": None if i % 3 == 0 else f'{{"id":{i},"v":"x\\"y"}}',
                     "key": f'{{"id":{i}}}', "server_id": 1, "txn_id": f"tx{i // 2}",
                     "file": "b.000001", "pos": 100 + i, "row": 0, "ts_ms": 5,
                     "seq": Decimal(make_seq(1, 100 + i, 0))})
    rows.append({**dict.fromkeys(ARROW_SCHEMA.names), "op": "s", "db": "shop", "table": "t",
                 "after": "{}", "file": "b.000001", "pos": 99, "row": 0,
                 "seq": Decimal(make_seq(1, 99, 0))})
    return pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)


def test_a_task_that_shares_keys_hands_its_messages_on_and_publishes_nothing():
    settings = KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:1"},
                             transaction_topic="{prefix}.txns")
    part = _range()
    part.shares_keys = True
    batches = [_batch(5), _batch(4, first=5)]
    out = list(_written(TaskPublisher(settings), iter(batches), part))
    *messages, summary = out
    assert summary.num_rows == 1 and summary.column("topic").null_count == 1
    done = read_summary(summary.column("summary")[0].as_py())
    assert done.rows == 11 and done.deferred == 9
    assert [r["op"] for r in done.schema_rows] == ["s", "s"]
    assert sum(t.tables["shop.t"] for t in done.txns.values()) == 9
    got = pa.Table.from_batches(messages)
    assert got.num_rows == 9 and got.column("summary").null_count == 9
    # the same bytes the task would have published itself, in seq order
    for batch, first in zip(batches, (0, 5)):
        changes = batch.slice(0, batch.num_rows - 1)
        topics, keys, values, headers, tombs = batch_messages(settings, changes)
        mine = got.slice(first, changes.num_rows)
        assert mine.column("topic").to_pylist() == topics
        assert mine.column("key").to_pylist() == keys
        assert mine.column("value").to_pylist() == values
        assert [pickle.loads(h) for h in mine.column("headers").to_pylist()] == headers
        assert mine.column("tombstone").to_pylist() == tombs
        assert mine.column("seq").to_pylist() == changes.column("seq").to_pylist()


def test_transaction_orders_are_numbered_in_the_task_as_the_mapinarrow_step_numbers_them():
    from mysqlcdc.sinks.kafka.txnorder import Numbering, number_partition

    batches = [_batch(5), _batch(6, first=5)]
    numbering = Numbering()
    streamed = pa.Table.from_batches([numbering.add(b) for b in batches])
    whole = pa.Table.from_batches(list(number_partition(iter(batches))))
    order = [str(s) for s in whole.column("seq").to_pylist()]
    by_seq = dict(zip((str(s) for s in streamed.column("seq").to_pylist()),
                      streamed.to_pylist()))
    assert [by_seq[s] for s in order] == whole.to_pylist()


_WITHOUT_PANDAS = """
import json, pickle, sys
import pyarrow as pa
from mysqlcdc.sinks.kafka.publish import encode_batch
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.sinks.kafka.tasks import _summary_row, Summary
settings = KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:1"})
out = []
for batch in pa.ipc.open_stream(sys.argv[1]):
    messages, changes, _, schema_rows, _ = encode_batch(settings, batch)
    topics, keys, values, headers, tombstones = messages
    out.append({"topics": topics, "keys": [k and k.decode() for k in keys],
                "values": [v.decode() for v in values], "schema": len(schema_rows)})
summary = _summary_row(Summary(rows=7))
out.append({"summary_rows": pickle.loads(summary.column("summary")[0].as_py()).rows,
            "nulls": [summary.column(i).null_count for i in range(summary.num_columns)]})
print(json.dumps({"out": out, "pandas": "pandas" in sys.modules}))
"""


def test_a_read_task_encodes_for_kafka_without_importing_pandas(tmp_path):
    """pyarrow imports pandas at its first conversion of a Python value (a string given to
    a compute function, ``from_pydict``): a third of a CPU second in the read task of
    every Kafka pipeline, which never uses pandas. Encoded from batches read off an Arrow
    IPC stream, as a read task reads the decode-ahead's spool, in a process of its own;
    the messages are those this process (which has pandas) makes of the same batches."""
    import json
    import subprocess
    import sys

    from mysqlcdc.sinks.kafka.publish import encode_batch

    rows = _batch(2, first=9).to_pylist()
    rows[-1]["after"] = None                      # a DROP: the table's topic gets a ``t``
    batches = [_batch(5), _batch(4, first=5), pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)]
    spool = tmp_path / "spool.arrow"
    with pa.ipc.new_stream(str(spool), ARROW_SCHEMA) as writer:
        for batch in batches:
            writer.write_batch(batch)
    run = subprocess.run([sys.executable, "-c", _WITHOUT_PANDAS, str(spool)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["pandas"] is False
    settings = KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:1"})
    for batch, mine in zip(batches, got["out"]):
        (topics, keys, values, _, _), changes, _, schema_rows, _ = encode_batch(settings, batch)
        assert mine["schema"] == len(schema_rows)
        assert mine["topics"] == topics and mine["keys"] == [k and k.decode() for k in keys]
        assert mine["values"] == [v.decode() for v in values]
    assert got["out"][-1] == {"summary_rows": 7, "nulls": [1] * 6 + [0]}
    assert [len(m["values"]) for m in got["out"][:-1]] == [5, 4, 3]
    assert json.loads(got["out"][2]["values"][-1])["op"] == "t"
