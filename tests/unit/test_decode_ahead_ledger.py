"""The decode-ahead's ledger (``spark.ahead``, DESIGN.md decision 24): what the query
adopts, and what it refuses (any doubt means it plans and decodes itself)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pyarrow as pa
import pytest

from mysqlcdc.capture import batchend
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.task import RangeTask
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.schema.history import Change, SchemaView
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.spark.ahead import Ledger, fingerprint, offset_key, read_spool
from mysqlcdc.types import BinlogPosition

START = {"file": "mariadb-bin.000001", "pos": 4, "gtid": "0-1-5", "ts": 17, "epoch": 0}


def _end(cap_pos: int = 9000) -> dict:
    end = batchend.end_offset(BinlogPosition.of("mariadb-bin.000001", 4),
                              BinlogPosition.of("mariadb-bin.000001", cap_pos), 150, None)
    return {**end, "gtid": "0-1-5", "ts": 17, "epoch": 0}


def _task(tmp_path, record: str = "r.json", table: str = "t") -> RangeTask:
    a = BinlogPosition.of("mariadb-bin.000001", 4)
    d = TableDef("db", table, (ColumnDef("id", "int"), ColumnDef("v", "varchar",
                                                                  charset="utf8mb4")))
    view = SchemaView(versions={("db", table): [Change(a, "bootstrap", "db", table, d)],
                                ("db", "u"): [Change(a, "bootstrap", "db", "u", d)]},
                      batch_start=a)
    rule = batchend.EndRule(cap=BinlogPosition.of("mariadb-bin.000001", 9000), events=150,
                            record=str(tmp_path / record))
    return RangeTask(ConnectionSettings(host="h", port=1, user="u"), 7, a,
                     BinlogPosition.of("mariadb-bin.000001", 9000),
                     TableFilter(("db.*",), ("db.x",)), schema=view, rule=rule)


def _ledger(tmp_path, pid: int | None = None) -> Ledger:
    ledger = Ledger(tmp_path / "ahead")
    ledger.begin(os.getpid() if pid is None else pid)
    return ledger


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_query_adopts_the_batch_planned_from_its_start(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.planning(START)
    ledger.plan(START, _end(), "fp")
    assert ledger.untaken() == 1
    assert ledger.adopt(dict(START)) == _end()
    assert ledger.untaken() == 0 and not ledger.diverged()
    assert ledger.counts()["adopted"] == 1


def test_a_batch_past_the_querys_own_cap_is_not_adopted(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.planning(START)
    ledger.plan(START, _end(9000), "fp")
    assert ledger.adopt(START, cap=BinlogPosition.of("mariadb-bin.000001", 8999)) is None
    assert ledger.diverged()          # the decode-ahead stops: the query plans from here


def test_the_next_batch_is_named_before_the_read_task_can_finish_this_one(tmp_path):
    """The query asks for the next batch the moment it commits one: the decode-ahead names
    that batch's start when it marks its batch decoded, so a query that asks before the
    decode-ahead plans it waits for it instead of planning it itself."""
    import threading
    import time

    end = _end()
    nxt = {**START, "pos": 9000}
    ledger = _ledger(tmp_path)
    ledger.planning(START)
    ledger.plan(START, end, "fp")
    assert ledger.adopt(START) == end
    ledger.decoded(START, following=nxt)
    ledger.complete(START)
    got: list = []
    asker = threading.Thread(target=lambda: got.append(ledger.adopt(nxt)))
    asker.start()
    time.sleep(0.2)                    # the decode-ahead is still busy with its record
    assert not ledger.diverged() and asker.is_alive()
    ledger.planning(nxt)
    ledger.plan(nxt, {**end, "mark": 2}, "fp")
    asker.join(timeout=5)
    assert got == [{**end, "mark": 2}] and not ledger.diverged()
    assert ledger.counts()["decoded"] == 1

    # the last batch names none: a query asking past it plans itself at once
    last = _ledger(tmp_path / "last")
    last.planning(START)
    last.plan(START, end, "fp")
    assert last.adopt(START) == end
    last.decoded(START)
    last.complete(START)
    assert last.adopt(nxt) is None and last.diverged()


def test_another_start_or_a_dead_or_finished_process_means_plan_yourself(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.planning({**START, "pos": 100})
    assert ledger.adopt(START) is None and ledger.diverged()

    dead = _ledger(tmp_path / "d", pid=_dead_pid())
    dead.planning(START)
    assert dead.adopt(START) is None

    over = _ledger(tmp_path / "o")
    over.planning(START)
    over.over("nothing more to read")
    assert over.adopt(START) is None
    assert Ledger(tmp_path / "missing").adopt(START) is None
    assert not (tmp_path / "missing").exists()


def test_a_spool_is_read_only_for_the_very_task_decoded(tmp_path):
    ledger = _ledger(tmp_path)
    task = _task(tmp_path)
    [spool] = ledger.plan(START, _end(), fingerprint(task))
    entry = ledger.spool_for(START, _end(), task)
    assert entry is not None
    assert ledger.spool_for(START, _end(9001), task) is None
    assert ledger.spool_for(START, _end(), _task(tmp_path, record="other.json")) is None
    assert ledger.spool_for(START, _end(), _task(tmp_path, table="t2")) is None

    batch = pa.record_batch({"seq": pa.array([1, 2], pa.int64())})
    with pa.OSFile(str(spool), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    never = lambda: pytest.fail("decoded although the spool was complete")
    assert [b.to_pydict() for b in read_spool(entry, never)] == [batch.to_pydict()]
    assert ledger.counts()["read"] == 1
    ledger.retire(_end())
    assert not spool.exists() and ledger.spool_for(START, _end(), task) is None


def _seqs(batches) -> list[int]:
    return [s for b in batches for s in b.column("seq").to_pylist()]


def _decoded():
    return iter([pa.record_batch({"seq": pa.array(range(i, i + 3), pa.int64())})
                 for i in (0, 3, 6)])


def test_a_spool_that_will_not_come_is_decoded_by_the_read_task(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.plan(START, _end(), "fp")
    ledger.failed(START)
    entry = str(ledger.folder / f"{offset_key(START)}.json")
    assert _seqs(read_spool(entry, _decoded)) == list(range(9))

    dead = _ledger(tmp_path / "d", pid=_dead_pid())
    dead.plan(START, _end(), "fp")
    assert _seqs(read_spool(str(dead.folder / f"{offset_key(START)}.json"), _decoded)) == \
        list(range(9))


def test_a_spool_cut_short_is_finished_by_decoding_the_rest(tmp_path):
    """The decode-ahead died after writing 4 rows: the read task yields those, then its own
    decoding of the task without its first 4 rows."""
    ledger = _ledger(tmp_path / "d", pid=_dead_pid())
    spool = ledger.plan(START, _end(), "fp")[0].with_suffix(".part")
    first = pa.record_batch({"seq": pa.array([0, 1, 2, 3], pa.int64())})
    with pa.OSFile(str(spool), "wb") as sink:
        w = pa.ipc.new_stream(sink, first.schema)
        w.write_batch(first)               # no end of stream: the writer was killed
    assert _seqs(read_spool(str(ledger.folder / f"{offset_key(START)}.json"), _decoded)) == \
        list(range(9))


def test_a_spool_is_read_while_it_is_written(tmp_path):
    import threading
    import time

    ledger = _ledger(tmp_path)
    [spool] = ledger.plan(START, _end(), "fp")
    part = spool.with_suffix(".part")
    batches = [pa.record_batch({"seq": pa.array([i], pa.int64())}) for i in range(5)]
    seen: list[int] = []
    finished: list[float] = []

    def write():
        with pa.OSFile(str(part), "wb") as sink:
            w = pa.ipc.new_stream(sink, batches[0].schema)
            for b in batches:
                w.write_batch(b)
                time.sleep(0.05)
            w.close()
        finished.append(time.monotonic())
        os.replace(part, spool)

    writer = threading.Thread(target=write)
    writer.start()
    first_at = None
    for b in read_spool(str(ledger.folder / f"{offset_key(START)}.json"),
                        lambda: pytest.fail("decoded although the spool came")):
        seen.extend(b.column("seq").to_pylist())
        first_at = first_at or time.monotonic()
    writer.join()
    assert seen == list(range(5))
    assert first_at < finished[0]           # read while it was written


def _spool(path, seqs, *, complete: bool = True) -> None:
    """A spool of one batch per seq; ``complete`` False: cut short (no end of stream)."""
    batches = [pa.record_batch({"seq": pa.array([i], pa.int64())}) for i in seqs]
    target = path if complete else path.with_suffix(".part")
    with pa.OSFile(str(target), "wb") as sink:
        w = pa.ipc.new_stream(sink, batches[0].schema)
        for b in batches:
            w.write_batch(b)
        if complete:
            w.close()


def test_a_batch_decoded_in_slices_is_read_as_one_once_its_record_is_written(tmp_path):
    """Slices are read in order; the read task ends only when the decode-ahead marked the
    batch complete (its record, put together from the slices', is written then: the query
    plans the next batch from it)."""
    import threading
    import time

    ledger = _ledger(tmp_path)
    spools = ledger.plan(START, _end(), "fp", slices=3)
    assert len({p.name for p in spools}) == 3
    _spool(spools[2], [6, 7, 8])              # a later slice may be complete first
    _spool(spools[0], [0, 1, 2])
    _spool(spools[1], [3, 4, 5])
    completed: list[float] = []

    def complete() -> None:
        time.sleep(0.3)
        completed.append(time.monotonic())
        ledger.complete(START)

    threading.Thread(target=complete).start()
    entry = str(ledger.folder / f"{offset_key(START)}.json")
    assert _seqs(read_spool(entry, lambda: pytest.fail("decoded although spooled"))) == \
        list(range(9))
    assert completed and time.monotonic() >= completed[0]
    assert (ledger.folder / f"{offset_key(START)}.used").exists()

    ledger.retire(_end())          # committed: its files go (the marks stay, to count)
    assert sorted(p.name for p in ledger.folder.iterdir()) == \
        [f"{offset_key(START)}.used", "state.json"]


def test_a_slice_cut_short_is_finished_by_decoding_the_rest(tmp_path):
    """The decode-ahead died in the second slice: the read task yields the rows read,
    then its own decoding of the whole task without them."""
    ledger = _ledger(tmp_path / "d", pid=_dead_pid())
    spools = ledger.plan(START, _end(), "fp", slices=2)
    _spool(spools[0], [0, 1, 2, 3])
    _spool(spools[1], [4, 5], complete=False)
    entry = str(ledger.folder / f"{offset_key(START)}.json")
    assert _seqs(read_spool(entry, _decoded)) == list(range(9))

    # every slice complete but the batch never marked so (its record may be missing):
    # the read task decodes it, passing over every row, and so writes the record itself
    ledger = _ledger(tmp_path / "e", pid=_dead_pid())
    spools = ledger.plan(START, _end(), "fp", slices=2)
    _spool(spools[0], [0, 1, 2, 3])
    _spool(spools[1], [4, 5, 6, 7, 8])
    decoded: list[bool] = []

    def decode():
        decoded.append(True)
        return _decoded()

    entry = str(ledger.folder / f"{offset_key(START)}.json")
    assert _seqs(read_spool(entry, decode)) == list(range(9)) and decoded


def test_the_fingerprint_is_the_same_in_every_process(tmp_path):
    task = _task(tmp_path)
    data = tmp_path / "task.pickle"
    data.write_bytes(pickle.dumps(task))
    code = ("import pickle,sys; from mysqlcdc.spark.ahead import fingerprint; "
            f"print(fingerprint(pickle.load(open({str(data)!r}, 'rb'))))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)},
                           check=True).stdout.strip() for seed in (1, 2, 3)}
    assert seen == {fingerprint(task)}
    assert fingerprint(task) != fingerprint(_task(tmp_path, table="t2"))


@pytest.mark.parametrize("offset", [START, {"pos": 4, "file": "mariadb-bin.000001"}])
def test_an_offset_key_survives_a_json_round_trip(offset):
    import json

    assert offset_key(json.loads(json.dumps(offset))) == offset_key(offset)


def test_a_writer_that_dies_while_the_read_task_waits_is_noticed(tmp_path):
    """The read task waits for more of a spool with pauses that grow, and looks at the
    writer's liveness only now and then: a writer killed after its first rows is still
    noticed, and the read task decodes the rest itself."""
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ledger = _ledger(tmp_path, pid=writer.pid)
        spool = ledger.plan(START, _end(), "fp")[0].with_suffix(".part")
        first = pa.record_batch({"seq": pa.array([0, 1], pa.int64())})
        with pa.OSFile(str(spool), "wb") as sink:
            pa.ipc.new_stream(sink, first.schema).write_batch(first)   # no end of stream
        seen: list[int] = []
        batches = read_spool(str(ledger.folder / f"{offset_key(START)}.json"), _decoded)
        seen.extend(next(batches).column("seq").to_pylist())   # what was spooled
        writer.kill()                                            # then the writer is gone
        writer.wait()
        seen.extend(_seqs(batches))
        assert seen == list(range(9))
    finally:
        writer.kill()
        writer.wait()
