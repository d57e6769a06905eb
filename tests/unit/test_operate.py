"""Pure parts of operating pipelines: the binlog runway, lag, request files, the seq epoch,
per-table counts, the dashboard's charts, start positions in the config."""

from __future__ import annotations

import re
from decimal import Decimal

import pyarrow as pa
import pytest

from mysqlcdc.api.dashboard import chart
from mysqlcdc.capture.control import SeekRequest, StreamControl
from mysqlcdc.config import load_pipeline_from_dict
from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.pipeline.monitor import (RunwayWarning, binlog_runway, bytes_behind,
                                       seconds_behind)
from mysqlcdc.spark.batches import finish_batches, read_counts, shift_seq
from mysqlcdc.types import SEQ_EPOCH, BinlogPosition, StartTimestamp

pytestmark = pytest.mark.unit

LOGS = [("b.000001", 1000), ("b.000002", 2000), ("b.000003", 500)]
DAY = 86400.0


def test_runway_from_the_next_files_birth():
    births = {"b.000001": 1_000, "b.000002": 5_000, "b.000003": 9_000}
    r = binlog_runway(LOGS, "b.000001", births, DAY, now=10_000)
    assert r.seconds == 5_000 + DAY - 10_000 and "closed" in r.basis
    # the file after it not seen yet: its own birth, a lower bound
    r = binlog_runway(LOGS, "b.000002", {"b.000002": 5_000}, DAY, now=10_000)
    assert r.seconds == 5_000 + DAY - 10_000 and "lower bound" in r.basis
    assert binlog_runway(LOGS, "b.000003", births, DAY, now=10_000).seconds == DAY  # active
    assert binlog_runway(LOGS, "b.000001", births, None).seconds is None           # no expiry
    assert binlog_runway(LOGS, "b.000000", births, DAY).seconds == 0.0             # purged
    assert binlog_runway(LOGS, "b.000001", {}, DAY).seconds is None                # unknown


def test_runway_warning_logs_once_per_crossing(caplog):
    warn = RunwayWarning()
    low = binlog_runway(LOGS, "b.000001", {"b.000002": 0}, 3600.0, now=1800)
    high = binlog_runway(LOGS, "b.000003", {}, DAY)
    assert warn.check("p", low, 6 * 3600) and warn.check("p", low, 6 * 3600)
    assert not warn.check("p", high, 6 * 3600)
    assert caplog.text.count("binlog runway 30m") == 1 and "back over" in caplog.text


def test_lag():
    assert bytes_behind(LOGS, BinlogPosition.of("b.000002", 1500)) == 500 + 500
    assert bytes_behind(LOGS, BinlogPosition.of("b.000009", 4)) is None
    assert seconds_behind(1_000_000, 0) == 0.0
    assert seconds_behind(1_000_000, 10, now=1_030) == 30.0
    assert seconds_behind(None, 10) is None


def test_seek_requests(tmp_path):
    control = StreamControl(tmp_path / "state")
    assert control.pending_seek() is None and not control.paused()
    control.set_paused(True)
    assert control.paused()
    control.set_paused(False)
    request = SeekRequest.new(BinlogPosition.of("b.000002", 120), gtid="0-1-5", epoch=2)
    control.request_seek(request)
    got = control.pending_seek()
    assert got == request
    assert got.offset() == {"file": "b.000002", "pos": 120, "gtid": "0-1-5", "epoch": 2,
                            "seek": request.id}
    control.retire_seek(SeekRequest.new(BinlogPosition.of("b.000001", 4)))  # another: kept
    assert control.pending_seek() == request
    control.retire_seek(request)
    assert control.pending_seek() is None
    assert (tmp_path / "state" / "seek-done" / f"{request.id}.json").is_file()


def _batch(rows: list[tuple]) -> pa.RecordBatch:
    cols = {f.name: [None] * len(rows) for f in ARROW_SCHEMA}
    for i, (db, table, op, file, pos, seq) in enumerate(rows):
        cols["db"][i], cols["table"][i], cols["op"][i] = db, table, op
        cols["file"][i], cols["pos"][i], cols["seq"][i] = file, pos, Decimal(seq)
    return pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)


def test_epoch_and_counts(tmp_path):
    one = _batch([("d", "t", "c", "b.1", 10, 5), ("d", "t", "c", "b.1", 10, 7),
                  ("d", "u", "d", "b.1", 50, 9)])
    two = _batch([("d", "u", "d", "b.1", 50, 11), ("d", "t", "c", "b.2", 10, 13)])
    out = list(finish_batches(iter([one, two]), epoch=2, counts=str(tmp_path)))
    seqs = [int(s) for b in out for s in b.column("seq").to_pylist()]
    assert seqs == [2 * SEQ_EPOCH + s for s in (5, 7, 9, 11, 13)]
    # rows; events are runs of one file:pos (an event split over two batches counts once)
    assert read_counts(tmp_path) == {("d", "t", "c"): (3, 2), ("d", "u", "d"): (2, 1)}
    list(finish_batches(iter([one]), counts=str(tmp_path)))     # the same worker, later
    assert read_counts(tmp_path)[("d", "t", "c")] == (5, 3)
    assert shift_seq(one, 0).column("seq") == one.column("seq")


def test_counts_match_a_row_by_row_count(tmp_path):
    # tables and ops mixed, null db/table (schema-less records), events of several rows,
    # an event split between batches
    import random

    r = random.Random(7)
    rows, pos = [], 100
    for i in range(3000):
        if r.random() < 0.6:
            pos += 37
        db, table = r.choice([("d", "t"), ("d", "u"), ("e", "t"), (None, None)])
        rows.append((db, table, r.choice("cud"), f"b.{1 + pos // 40000}", pos, i + 1))
    whole = _batch(rows)      # batches that are slices of a larger one count the same
    batches = [_batch(rows[:1234]), whole.slice(1234, 1666), _batch(rows[2900:2901]),
               whole.slice(2901)]
    list(finish_batches(iter(batches), counts=str(tmp_path)))
    want: dict = {}
    previous = None
    for db, table, op, file, p, _seq in rows:
        entry = want.setdefault((db or "", table or "", op), [0, 0])
        entry[0] += 1
        entry[1] += (file, p) != previous
        previous = (file, p)
    assert read_counts(tmp_path) == {k: tuple(v) for k, v in want.items()}


def test_chart_plots_the_last_hour():
    svg = chart("t", "", [(-1.0, 5.0), (3000.0, 2.0), (3500.0, 0.0), (3600.0, None)],
                now=3600.0, color="#000")
    assert re.findall(r'data-value="([^"]+)"', svg) == ["2", "0"]   # the first is too old
    assert "no data yet" in chart("t", "", [], now=1.0, color="#000")


def test_start_forms_in_the_config():
    base = {"name": "p", "source": {"host": "h", "user": "u", "server_id": 9},
            "spark": {"checkpoint": "/tmp/ck"}, "sinks": [{"console": {}}]}

    def start(value):
        return load_pipeline_from_dict({**base, "source": {**base["source"], "start": value}}
                                       ).source.start
    assert start({"gtid": "0-1-5"}) == GtidSet.parse("0-1-5")
    assert start("0-1-5,1-2-3") == GtidSet.parse("0-1-5,1-2-3")
    assert start({"timestamp": "2026-11-01T12:00:00Z"}) == StartTimestamp.parse(
        "2026-11-01T12:00:00Z")
    assert start("b.000002:4") == BinlogPosition.of("b.000002", 4)
    cfg = load_pipeline_from_dict({**base, "source": {**base["source"], "heartbeat": {}}})
    assert cfg.source.heartbeat.table == "mysqlcdc.mysqlcdc_heartbeat"
    from mysqlcdc.pipeline.runner import source_options

    assert "mysqlcdc.mysqlcdc_heartbeat" in source_options(cfg)["exclude"]


def test_sink_counters_add_up_over_processes(tmp_path, monkeypatch):
    import json

    from mysqlcdc import stats

    monkeypatch.setenv(stats.ENV, str(tmp_path))
    before = stats.totals().get(("sink_retries", "p-unit", "kafka"), 0)
    stats.count("sink_retries", "p-unit", "kafka")
    stats.count("sink_retries", "p-unit", "kafka")
    (tmp_path / "executor-1.json").write_text(json.dumps([["sink_retries", "p-unit", "kafka", 5],
                                                          ["sink_errors", "p-unit", "kafka", 1]]))
    totals = stats.totals()
    assert totals[("sink_retries", "p-unit", "kafka")] == before + 2 + 5
    assert totals[("sink_errors", "p-unit", "kafka")] == 1


def test_readers_wait_for_the_poller_and_see_counts_and_position_together(tmp_path):
    """The API's reads hold the lock the poller folds progress in with: a read made while
    a batch is half folded (its rows counted, its position not yet) waits for the rest."""
    import threading
    import time

    import httpx
    import uvicorn

    from mysqlcdc.api.app import create_app
    from mysqlcdc.api.service import PipelineService, PipelineState
    from mysqlcdc.pipeline.localserver import free_port

    service = PipelineService(tmp_path, lambda: None)
    state = service.pipelines["p"] = PipelineState("p", tmp_path / "p.yaml", None, state="running")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    seen: dict = {}
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"

        def read(path: str) -> None:
            got = httpx.get(url + path, timeout=30)
            seen[path] = got.text if path == "/metrics" else got.json()

        with service.reading():
            state.rows_total = 12                       # the poller, half way through a batch
            readers = [threading.Thread(target=read, args=(path,))
                       for path in ("/pipelines", "/pipelines/p", "/metrics")]
            for r in readers:
                r.start()
            for r in readers:
                r.join(0.5)
            assert all(r.is_alive() for r in readers) and not seen   # they wait
            state.position = "mariadb-bin.000003:952929"
        for r in readers:
            r.join(30)
    finally:
        server.should_exit = True
        thread.join(10)
    [listed] = seen["/pipelines"]
    for summary in (listed, seen["/pipelines/p"]):
        assert (summary["rows_total"], summary["position"]) == (12, "mariadb-bin.000003:952929")
    assert 'mysqlcdc_rows_total{pipeline="p"} 12.0' in seen["/metrics"]
