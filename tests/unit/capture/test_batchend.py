"""Batches whose end the read task finds: offsets, records, slices (no server)."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.capture import batchend
from mysqlcdc.capture.batchend import Found
from mysqlcdc.schema.history import Quarantine
from mysqlcdc.spark.checkpoint import batch_offset
from mysqlcdc.types import BinlogPosition

pytestmark = pytest.mark.unit

A = BinlogPosition.of("bin.000007", 1000)
CAP = BinlogPosition.of("bin.000009", 500)


def test_an_end_offset_is_stable_json_and_keys_its_record(tmp_path):
    end = batchend.end_offset(A, CAP, 50000, None, [BinlogPosition.of("bin.000008", 4096)])
    assert list(end) == ["file", "pos", "upto"] and batchend.pending(end)
    assert json.loads(json.dumps(end)) == end
    again = batchend.end_offset(A, CAP, 50000, None, [BinlogPosition.of("bin.000008", 4096)])
    assert batchend.spec_key(end) == batchend.spec_key(again)
    assert batchend.spec_key(end) != batchend.spec_key(batchend.end_offset(A, CAP, 50001, None))
    assert "known" not in end["upto"]                          # only when past the start
    later = batchend.end_offset(A, CAP, None, BinlogPosition.of("bin.000007", 2000))
    assert later["upto"]["known"] == "bin.000007:2000"
    rules = batchend.task_rules(end, tmp_path, {"bin.000007": 1})
    assert [(r.cut_from, r.cut_to) for r in rules] == [
        (None, BinlogPosition.of("bin.000008", 4096)), (BinlogPosition.of("bin.000008", 4096), None)]
    assert all(r.cap == CAP and r.events == 50000 and r.births == {"bin.000007": 1}
               for r in rules)


def _found(start, end, reason, held=()):
    return Found(start, end, reason, events=10, bytes=1000, rows=5, held=list(held),
                 births={"bin.000007": 123})


def test_the_records_of_a_sliced_batch_chain_to_its_end(tmp_path):
    cut = BinlogPosition.of("bin.000008", 4096)
    end = batchend.end_offset(A, CAP, 100, None, [cut, BinlogPosition.of("bin.000008", 9000)])
    q = Quarantine("db", "t", BinlogPosition.of("bin.000008", 5000), A, "why")
    mid = BinlogPosition.of("bin.000008", 4100)
    stop = BinlogPosition.of("bin.000008", 7000)
    parts = [_found(A, mid, "slice"), _found(mid, stop, "events", [q]),
             _found(stop, stop, "empty", [q])]
    assert batchend.read_batch(tmp_path, end) is None          # a record missing: not yet
    for i, f in enumerate(parts):
        batchend.write_found(batchend.record_path(tmp_path, end, i), f)
    whole = batchend.read_batch(tmp_path, end)
    assert (whole.start, whole.end, whole.reason) == (A, stop, "events")
    assert whole.held == [q] and whole.rows == 15 and whole.events == 30
    # an empty slice before the one that ended the batch: the records do not chain
    batchend.write_found(batchend.record_path(tmp_path, end, 0), _found(A, A, "empty"))
    assert batchend.read_batch(tmp_path, end) is None


def test_a_checkpoint_offset_resolves_through_its_record(tmp_path):
    end = batchend.end_offset(A, CAP, 100, None)
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    (offsets / "3").write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps(end) + "\n")
    assert batch_offset(tmp_path, 3) == A                      # no record: its start, a lower bound
    stop = BinlogPosition.of("bin.000008", 777)
    batchend.write_found(batchend.record_path(tmp_path / "mysqlcdc-schema", end), _found(A, stop, "events"))
    assert batch_offset(tmp_path, 3) == stop


def test_a_pending_offset_resolves_to_the_gtid_set_and_time_at_its_end(tmp_path):
    # as the source stores it: the rule, then the GTID set, commit time and epoch at its start
    end = {**batchend.end_offset(A, CAP, 100, None, [BinlogPosition.of("bin.000008", 4096)]),
           "gtid": "0-1-10", "ts": 1000, "epoch": 1}
    assert batchend.spec_key(end) != batchend.spec_key({**end, "epoch": 2})
    assert batchend.resolved_offset(end, tmp_path) == {"file": A.file, "pos": A.pos,
                                                       "gtid": "0-1-10", "ts": 1000, "epoch": 1}
    mid, stop = BinlogPosition.of("bin.000008", 4100), BinlogPosition.of("bin.000008", 7000)
    first = _found(A, mid, "slice")
    first.gtids, first.last_ts = "0-1-12,1-1-3", 2000
    second = _found(mid, stop, "cap")
    second.gtids, second.last_ts = "0-2-15", 3000
    for i, f in enumerate((first, second)):
        batchend.write_found(batchend.record_path(tmp_path, end, i), f)
    assert batchend.resolved_offset(end, tmp_path) == {
        "file": stop.file, "pos": stop.pos, "gtid": "0-2-15,1-1-3", "ts": 3000, "epoch": 1}
    assert batchend.resolved_offset({"file": "b.1", "pos": 4}, tmp_path) == {"file": "b.1", "pos": 4}


def test_slices_cut_the_expected_bytes_evenly_across_files():
    logs = [("bin.000007", 5000), ("bin.000008", 10000), ("bin.000009", 3000)]
    cuts = batchend.slice_cuts(A, CAP, 3, logs, min_bytes=100)
    # 4000 + 9996 + 496 bytes: a cut every 4830.7, both in the middle file
    assert [str(c) for c in cuts] == ["bin.000008:834", "bin.000008:5665"]
    assert batchend.slice_cuts(A, CAP, 4, logs, min_bytes=10**6) == []     # too small to cut
