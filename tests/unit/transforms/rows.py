"""Envelope rows and batches for the transform unit tests."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pyarrow as pa

from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.transforms.api import TaskPlace, TransformContext
from mysqlcdc.transforms.batch import EventBatch

_seq = iter(range(1, 1_000_000))


def row(op: str, table: str, before=None, after=None, key=None, *, seq: int | None = None,
        txn: str = "t1", pos: int = 100, db: str = "shop") -> dict:
    image = after if after is not None else before
    key = key if key is not None else ({"id": image["id"]} if image and "id" in image else None)
    def text(v):
        return None if v is None else orjson.dumps(v).decode()
    return dict(op=op, db=db, table=table, before=text(before), after=text(after), key=text(key),
                ts_ms=1_700_000_000_000, server_id=1, gtid=None, txn_id=txn,
                file="mariadb-bin.000001", pos=pos, row=0,
                seq=Decimal(seq if seq is not None else next(_seq)), query=None, moved_key=None)


def batch(*rows: dict) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(list(rows), schema=ARROW_SCHEMA)


def events(*rows: dict) -> EventBatch:
    return EventBatch(batch(*rows))


def ctx(**kw) -> TransformContext:
    return TransformContext(place=TaskPlace("p", "0-test", "q", 7, 0, 0), **kw)


def after(ev: EventBatch, i: int | None = None):
    values = [None if t is None else orjson.loads(t) for t in ev.to_batch().column("after").to_pylist()]
    return values if i is None else values[i]
