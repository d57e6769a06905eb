"""A read task that moves decoded batches into changelog files does without pandas and
pyarrow's query engine: it counts its rows (``spark.batches``) and names its files
(``sinks.changelog.files``) from Arrow's buffers. pyarrow would import pandas at its
first conversion of Python values and the engine at the first ``group_by``: together
a few tenths of a CPU second in every read task's process. Run in a process of its
own, on batches read from an Arrow IPC stream as a decode-ahead spool is read."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mysqlcdc.envelope.model import ARROW_SCHEMA

pytestmark = pytest.mark.unit

_PROBE = """
import json, sys
import pyarrow as pa
from mysqlcdc.sinks.changelog.files import PartFiles
from mysqlcdc.spark.batches import finish_batches, read_counts
batches = list(pa.ipc.open_stream(sys.argv[1]))
out = list(PartFiles(root=sys.argv[2], batch_id=3).write(
    finish_batches(iter(batches), counts=sys.argv[3])))
print(json.dumps({"files": [b.to_pylist() for b in out],
                  "counts": sorted([*k, *v] for k, v in read_counts(sys.argv[3]).items()),
                  "pandas": "pandas" in sys.modules, "acero": "pyarrow.acero" in sys.modules}))
"""


def _rows(rows: list[tuple]) -> pa.RecordBatch:
    cols = {f.name: [None] * len(rows) for f in ARROW_SCHEMA}
    for i, (db, table, op, file, pos) in enumerate(rows):
        cols["db"][i], cols["table"][i], cols["op"][i] = db, table, op
        cols["file"][i], cols["pos"][i], cols["seq"][i] = file, pos, Decimal(i + 1)
        cols["ts_ms"][i] = 1_700_000_000_000 + i
        cols["after"][i] = json.dumps({"id": i})
    return pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)


def test_changelog_files_from_a_spool_leave_pandas_and_the_engine_unimported(tmp_path):
    one = _rows([("d", "t", "c", "b.1", 10), ("d", "t", "c", "b.1", 10), ("d", "t", "u", "b.1", 50)])
    two = _rows([("d", "t", "u", "b.1", 50), ("e", "é", "d", "b.2", 4), ("e", "é", "d", "b.2", 9)])
    spool = tmp_path / "spool.arrow"
    with pa.ipc.new_stream(str(spool), ARROW_SCHEMA) as writer:
        writer.write_batch(one)
        writer.write_batch(two)
    root, counts = tmp_path / "changelog", tmp_path / "counts"
    run = subprocess.run([sys.executable, "-c", _PROBE, str(spool), str(root), str(counts)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert not got["pandas"] and not got["acero"]
    assert got["counts"] == [["d", "t", "c", 2, 1], ["d", "t", "u", 2, 1], ["e", "é", "d", 2, 2]]
    files = got["files"][0]
    assert sorted(json.loads(f["partition_values"])["table"] for f in files) == ["t", "é"]
    for f in files:
        rows = pq.read_table(root / f["path"]).num_rows
        assert json.loads(f["stats"])["numRecords"] == rows and f["size"] > 0
    assert sum(json.loads(f["stats"])["numRecords"] for f in files) == 6
