"""How long a replication stream waits in silence before it counts the connection as
dropped, against the heartbeat period it asks the server for (protocol/stream.py)."""

from __future__ import annotations

import pytest

from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.protocol.stream import SILENT_DROP_SECONDS, ReplicationStream
from mysqlcdc.types import BinlogPosition

pytestmark = pytest.mark.unit

START = BinlogPosition.of("mysql-bin.000001", 4)


def _stream(settings=None, **kw) -> ReplicationStream:
    return ReplicationStream(settings or ConnectionSettings(host="127.0.0.1", port=1, user="u"),
                             server_id=7, start=START, **kw)


def test_one_second_heartbeats_still_take_the_silence_floor_to_count_a_drop():
    stream = _stream()
    assert stream.heartbeat_seconds == 1.0          # a stopped reader's id frees in ~2 s
    assert stream.read_timeout == SILENT_DROP_SECONDS == 15.0


def test_slow_heartbeats_and_a_longer_read_timeout_wait_longer():
    assert _stream(heartbeat_seconds=10).read_timeout == 30.0
    settings = ConnectionSettings(host="127.0.0.1", port=1, user="u", read_timeout=60.0)
    assert _stream(settings).read_timeout == 60.0
    assert _stream(settings, heartbeat_seconds=0).read_timeout == 60.0   # no heartbeats
