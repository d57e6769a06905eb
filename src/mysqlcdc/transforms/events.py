"""Envelope rows <-> the event dicts user code sees.

An event is a dict with the envelope's fields (docs/ENVELOPE.md) as keys: ``op``,
``db``, ``table``, ``before``, ``after``, ``key``, ``ts_ms``, ``server_id``, ``gtid``,
``txn_id``, ``file``, ``pos``, ``row``, ``seq`` (an int), ``query``, ``moved_key``,
plus any column an earlier transform added. ``before``, ``after``, ``key`` and
``moved_key`` are dicts (or None) of typed values: the column types the schema
history has for the table at the event's position decide the Python type of each
value (table in :mod:`mysqlcdc.envelope.values`). For schema-change records
(``op = s``) ``before``/``after`` are the table definitions as plain dicts.

What user code returns is turned back into envelope rows: images are encoded with
the same column types, so a value left alone comes back as exactly the text it had.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable

import orjson
import pyarrow as pa

from mysqlcdc.envelope.model import ENVELOPE_FIELDS, OP_SCHEMA, OP_TRUNCATE
from mysqlcdc.envelope.values import image_decoder_keeping, image_dumper
from mysqlcdc.errors import TransformResultError
from mysqlcdc.schema.history import SchemaHistory
from mysqlcdc.transforms.batch import parse_json_column
from mysqlcdc.schema.model import TableDef
from mysqlcdc.types import BinlogPosition

__all__ = ["Definitions", "to_events", "from_events", "ENVELOPE_NAMES", "IMAGE_NAMES",
           "plain_event", "Untouched", "Kept"]

ENVELOPE_NAMES = tuple(name for name, _, _ in ENVELOPE_FIELDS)
IMAGE_NAMES = ("before", "after", "key", "moved_key")
_loads, _dumps = orjson.loads, orjson.dumps


class Definitions:
    """Table definitions at a binlog position, from a pipeline's schema history folder
    (None: no history; images then keep their JSON values)."""

    def __init__(self, history_dir: str | None) -> None:
        self.history = SchemaHistory(history_dir) if history_dir else None
        self._memo: dict[tuple, TableDef | None] = {}
        self._coders: dict[int, tuple] = {}

    def refresh(self) -> None:
        if self.history is not None:
            self.history.reload()
            self._memo.clear()

    def at(self, db: str, table: str, file: str | None, pos: int | None) -> TableDef | None:
        if self.history is None or file is None or pos is None:
            return None
        key = (db, table, file, pos)
        if key not in self._memo:
            if len(self._memo) > 100_000:
                self._memo.clear()
            self._memo[key] = self.history.definition(db, table, BinlogPosition.of(file, pos))
        return self._memo[key]

    def coders(self, definition: TableDef | None) -> tuple:
        """(decode, dump) of images for a definition (cached per definition)."""
        hit = self._coders.get(id(definition))
        if hit is None or hit[0] is not definition:
            hit = self._coders[id(definition)] = (definition, image_decoder_keeping(definition),
                                                   image_dumper(definition))
        return hit[1], hit[2]


class Untouched(dict):
    """An envelope row (images still JSON text) that goes back out as it came in."""


def _row_ops(op: str | None) -> bool:
    return op not in (OP_SCHEMA, OP_TRUNCATE)


_PLAIN = (image_decoder_keeping(None), image_dumper(None))


def _coders_for(definitions: Definitions | None, event: dict) -> tuple:
    if definitions is None or not _row_ops(event.get("op")):
        return _PLAIN
    return definitions.coders(definitions.at(event["db"], event["table"], event["file"],
                                             event["pos"]))


class Kept(dict):
    """id(image dict) -> (the dict, what its decoding converted): lets ``from_events`` give
    a value the function left alone its exact text back without encoding it again."""

    def add(self, image: dict, originals: dict) -> None:
        if originals:
            self[id(image)] = (image, originals)

    def of(self, image: dict) -> dict | None:
        hit = self.get(id(image))
        return hit[1] if hit is not None and hit[0] is image else None


def to_events(batch: pa.RecordBatch, definitions: Definitions | None,
              kept: Kept | None = None) -> list[dict[str, Any]]:
    """Every row of ``batch`` as an event dict with typed images; each image column is
    parsed in one orjson call."""
    events = batch.to_pylist()
    seqs = batch.column("seq").cast(pa.string()).to_pylist()
    for event, seq in zip(events, seqs):
        event["seq"] = None if seq is None else int(seq)
    images = {name: parse_json_column(batch.column(name)) for name in IMAGE_NAMES
              if name in batch.schema.names}
    for i, event in enumerate(events):
        decode = _coders_for(definitions, event)[0]
        for name, parsed in images.items():
            image = event[name] = parsed[i]
            if type(image) is dict:
                originals = decode(image)
                if kept is not None:
                    kept.add(image, originals)
    return events


def plain_event(row: dict[str, Any]) -> dict[str, Any]:
    """An envelope row as JSON-able values (images stay JSON text): for dead letters."""
    out = dict(row)
    seq = out.get("seq")
    if isinstance(seq, Decimal):
        out["seq"] = str(seq)
    return out


def from_events(events: Iterable[dict[str, Any]], schema: pa.Schema,
                definitions: Definitions | None, kept: Kept | None = None) -> pa.RecordBatch:
    """Event dicts -> a record batch of ``schema`` (images encoded back to JSON text)."""
    events = list(events)
    columns: dict[str, list] = {name: [e.get(name) for e in events] for name in schema.names
                                if name not in IMAGE_NAMES}
    images = [name for name in IMAGE_NAMES if name in schema.names]
    texts: dict[str, list] = {name: [] for name in images}
    for event in events:
        if type(event) is Untouched:
            for name in images:
                texts[name].append(event.get(name))
            continue
        dump = _coders_for(definitions, event)[1]
        for name in images:
            texts[name].append(_image_text(name, event.get(name), dump, kept))
    columns.update(texts)
    return _batch(columns, schema)


def _image_text(name: str, value: Any, dump, kept: Kept | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TransformResultError(f"event field {name!r} must be a dict or None, "
                                   f"got {type(value).__name__}")
    try:
        return dump(value, kept.of(value) if kept else None).decode()
    except (TypeError, orjson.JSONEncodeError) as err:
        raise TransformResultError(f"event field {name!r} holds a value with no JSON "
                                   f"encoding: {err}") from None


def _batch(columns: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for f in schema:
        try:
            arrays.append(pa.array(columns[f.name], f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as err:
            raise TransformResultError(f"event field {f.name!r} does not fit its column type "
                                       f"{f.type}: {err}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
