"""``outbox``: the transactional outbox router.

An application that must publish an event together with a change writes both in one
transaction: the change to its own tables, the event as an INSERT into an outbox
table (id, aggregate type, aggregate id, event type, payload). The binlog then holds
the event exactly when the change committed, and this transform turns the outbox
inserts into messages:

* only inserts into the outbox table come out; every other event of the stream is
  dropped, and so are the outbox's deletes (applications clean the table up) and
  updates (an outbox row is written once);
* ``key`` is the aggregate id as text (the message key: events of one aggregate stay
  in order on one partition);
* ``after`` is the payload, expanded: a JSON column's value, or the JSON a text
  column holds;
* new columns: ``topic`` from the ``topic`` template (``outbox.event.{aggregate_type}``),
  ``message_value`` (the payload JSON, to be sent as the message value as is) and
  ``message_headers`` (a JSON object: ``id``, ``eventType``, ``aggregateType``, to be
  sent as message headers).

A payload that is not JSON is an error (``on_error``: fail, or dead-letter the event).
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.errors import TransformError
from mysqlcdc.transforms.api import Transform, TransformContext
from mysqlcdc.transforms.batch import EventBatch
from mysqlcdc.transforms.events import plain_event

__all__ = ["Outbox", "OUTBOX_COLUMNS"]

OUTBOX_COLUMNS = {"topic": pa.string(), "message_value": pa.string(),
                  "message_headers": pa.string()}


class Outbox(Transform):
    kind = "outbox"

    def __init__(self, table: str, id: str = "id", aggregate_type: str = "aggregatetype",
                 aggregate_id: str = "aggregateid", event_type: str = "type",
                 payload: str = "payload", topic: str = "outbox.event.{aggregate_type}",
                 include_snapshot: bool = False, on_error: str = "fail") -> None:
        self.db, self.table = table.split(".", 1)
        self.fields = {"id": id, "aggregate_type": aggregate_type, "aggregate_id": aggregate_id,
                       "event_type": event_type, "payload": payload}
        self.topic = topic
        self.ops = ("c", "r") if include_snapshot else ("c",)
        self.on_error = on_error
        self._tables = TableFilter.exact(self.db, self.table)

    def columns(self) -> dict[str, pa.DataType]:
        return dict(OUTBOX_COLUMNS)

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        mask = events.mask_of(self._tables, self.ops)
        events = events.filter(mask)
        if not events.num_rows:
            return events
        images = events.images("after")
        f = self.fields
        keys, payloads, topics, headers, good = [], [], [], [], []
        for i, image in enumerate(images):
            try:
                payload = _payload((image or {}).get(f["payload"]))
                kind = _text(image.get(f["aggregate_type"]))
                keys.append(_text(image.get(f["aggregate_id"])))
                payloads.append(payload)
                topics.append(self.topic.format(aggregate_type=kind, db=self.db,
                                                table=self.table))
                headers.append(orjson.dumps({"id": _text(image.get(f["id"])),
                                             "eventType": _text(image.get(f["event_type"])),
                                             "aggregateType": kind}).decode())
                good.append(True)
            except (ValueError, TypeError, AttributeError, KeyError) as exc:
                good.append(False)
                self._failed(events, i, exc, ctx)
        if not all(good):
            keep = pa.array(good)
            events = EventBatch(events.to_batch().filter(keep))
        return self._rebuilt(events, keys, payloads, topics, headers)

    def _failed(self, events: EventBatch, i: int, exc: Exception, ctx: TransformContext) -> None:
        row = events.to_batch().slice(i, 1).to_pylist()[0]
        if self.on_error == "dead_letter":
            ctx.dead_letter(plain_event(row), self.describe(), exc, "")
            return
        raise TransformError(
            f"{self.describe()}: the outbox row {row.get('after')} at {row.get('file')}:"
            f"{row.get('pos')} (seq {row.get('seq')}) cannot be routed: {exc}",
            hint="The payload column must hold JSON and the id columns values; fix the "
            "writer of the outbox or set on_error: dead_letter.")

    def _rebuilt(self, events: EventBatch, keys, payloads, topics, headers) -> EventBatch:
        n = events.num_rows
        out = EventBatch(events.to_batch())
        out.set_column("op", pa.array(["c"] * n, pa.string()))
        out.set_column("before", pa.nulls(n, pa.string()))
        out.set_column("after", pa.array(payloads, pa.string()))
        out.set_column("key", pa.array(keys, pa.string()))
        out.set_column("moved_key", pa.nulls(n, pa.string()))
        out.set_column("topic", pa.array(topics, pa.string()))
        out.set_column("message_value", pa.array(payloads, pa.string()))
        out.set_column("message_headers", pa.array(headers, pa.string()))
        return out


def _text(value) -> str:
    if value is None:
        raise ValueError("a routing column is null")
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _payload(value) -> str:
    """The payload as JSON text: a JSON column's value, or the JSON a text column holds."""
    if value is None:
        return "null"
    if isinstance(value, str):
        try:
            orjson.loads(value)
            return value.strip()            # the application's own text, byte for byte
        except orjson.JSONDecodeError as err:
            raise ValueError(f"the payload is not JSON ({err})") from None
    return orjson.dumps(value).decode()

