"""The collector's pace in mysqlcdc's loops (``mysqlcdc.collector``)."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from mysqlcdc.collector import YOUNG_THRESHOLD, fewer_collections


@pytest.fixture
def default_pace():
    """Python's default thresholds for the test; the process's own afterwards."""
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        (gc.enable if enabled else gc.disable)()


def test_raises_the_young_threshold_but_never_lowers_or_enables_it(default_pace):
    fewer_collections()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    gc.set_threshold(YOUNG_THRESHOLD * 2, 5, 5)
    fewer_collections()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 5, 5)
    gc.set_threshold(0, 10, 10)          # 0: automatic collection off; stays off
    fewer_collections()
    assert gc.get_threshold()[0] == 0


def _binlog(tmp_path: Path) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import struct

    from decode_micro import event, fde

    from mysqlcdc.binlog.constants import BINLOG_MAGIC

    path = tmp_path / "binlog.000001"
    path.write_bytes(BINLOG_MAGIC + fde() + event(16, struct.pack("<Q", 9)))
    return str(path)


def test_the_file_decoder_sets_the_pace_when_it_starts(tmp_path, default_pace):
    from mysqlcdc.capture.offline import iter_file_batches

    batches = iter_file_batches([_binlog(tmp_path)], tables={})
    assert gc.get_threshold()[0] == 700            # a generator: nothing ran yet
    assert list(batches) == []
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD


def test_the_stream_decoders_set_the_pace_when_they_start(tmp_path, default_pace):
    from mysqlcdc.binlog.file import iter_binlog_file
    from mysqlcdc.binlog.parser import BinlogParser
    from mysqlcdc.capture.batchend import EndRule, iter_until
    from mysqlcdc.capture.changes import ChangeDecoder, FileEvent, iter_change_batches
    from mysqlcdc.types import BinlogPosition

    path = _binlog(tmp_path)
    name = Path(path).name

    def raws():
        return [FileEvent(name, pos, data) for pos, data in iter_binlog_file(path)]

    assert list(iter_change_batches(raws(), ChangeDecoder(BinlogParser(tables={}.get)))) == []
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD

    gc.set_threshold(700, 10, 10)
    end = Path(path).stat().st_size             # the range: the whole file
    rule = EndRule(cap=BinlogPosition.of(name, end), events=1_000)
    assert list(iter_until(raws(), ChangeDecoder(BinlogParser(tables={}.get)),
                           BinlogPosition.of(name, 4), rule)) == []
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD


def test_encoding_kafka_messages_sets_the_pace(default_pace):
    import pyarrow as pa

    from mysqlcdc.envelope.model import ARROW_SCHEMA
    from mysqlcdc.sinks.kafka.publish import encode_messages
    from mysqlcdc.sinks.kafka.settings import KafkaSettings

    settings = KafkaSettings(producer={"bootstrap.servers": "b"})
    encode_messages(settings, pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA))
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
