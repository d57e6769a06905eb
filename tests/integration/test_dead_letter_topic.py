"""The dead-letter Kafka topic against the real broker (no Spark): what a letter holds, and a
named error when the broker refuses."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.errors import DeadLetterWriteError
from mysqlcdc.sinks.dead_letter import make_writer
from mysqlcdc.sinks.dead_letter.settings import DeadLetterSettings
from mysqlcdc.transforms.api import DeadLetter, TaskPlace
from mysqlcdc.transforms.events import plain_event

from tests.support.kafka import read_topic
from tests.unit.transforms.rows import row

pytestmark = pytest.mark.integration


def _letter(i: int) -> DeadLetter:
    event = plain_event({**row("c", "user", after={"id": i, "v": "x"}), "topic": "t.x"})
    return DeadLetter(event=event, transform="transforms[3] (python) m:f",
                      error_type="ValueError", error_message=f"bad {i}",
                      traceback="Traceback ...\nValueError: bad", failed_at_ms=1)


def test_letters_to_a_topic(kafka):
    writer = make_writer(DeadLetterSettings(topic="i15.dead-letters",
                                            producer={"bootstrap.servers": kafka.bootstrap},
                                            delivery_timeout_s=10))
    place = TaskPlace("shop", "1-kafka", "qid", 12, 0, 1)
    writer.write(place, [_letter(1), _letter(2)])
    messages = read_topic(kafka.bootstrap, "i15.dead-letters")[0]
    assert [m.key() for m in messages] == [b'{"id":1}', b'{"id":2}']
    first = json.loads(messages[0].value())
    assert (first["pipeline"], first["sink"], first["batch_id"], first["stage"]) == \
        ("shop", "1-kafka", 12, 1)
    assert first["error_message"] == "bad 1" and json.loads(first["after"]) == {"id": 1, "v": "x"}
    assert json.loads(first["extra"]) == {"topic": "t.x"} and first["seq"].isdigit()
    assert dict(messages[0].headers())["transform"] == b"transforms[3] (python) m:f"


def test_unreachable_broker_is_a_named_error():
    from mysqlcdc.pipeline.localserver import free_port

    writer = make_writer(DeadLetterSettings(
        topic="x", producer={"bootstrap.servers": f"127.0.0.1:{free_port()}"},
        delivery_timeout_s=2))
    with pytest.raises(DeadLetterWriteError, match="cannot write dead letters to topic x"):
        writer.write(TaskPlace("p", "0-x", "q", 0, 0, 0), [_letter(1)])
