"""``python``: the user's own function, per event or per batch.

Per event (``function: "mypkg.cdc:transform"``)::

    def transform(event: dict) -> dict | list[dict] | None: ...
    def transform(event: dict, helpers) -> ...          # with the helper functions

The event has the envelope's fields as keys, ``before``/``after``/``key`` as dicts of
typed values (:mod:`mysqlcdc.transforms.events`). Return the event (changed or not), a
new dict, a list of events (fan out; each inherits from the input every envelope field
it does not set) or None (the event is dropped). Keys other than the stream's columns
are refused: declare new columns with ``columns: {name: type}``.

Per batch (``batch_function: "mypkg.cdc:transform_batch"``)::

    def transform_batch(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch: ...

gets the envelope columns as Arrow arrays (images as JSON text) and returns a batch
with the same columns (plus the declared ``columns``), any number of rows.

Failures: an exception, or a result that is not an event, is never ignored. With
``on_error: fail`` (the default) the pipeline stops with TRANSFORM_FAILED naming the
event's table, key and position, with the function's traceback. With ``on_error:
dead_letter`` the event (for a batch function: every event of the batch) goes to the
dead-letter sink with the error, and the pipeline continues.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Any, Callable

import pyarrow as pa

from mysqlcdc.errors import TransformError, TransformResultError
from mysqlcdc.transforms.api import Transform, TransformContext
from mysqlcdc.transforms.batch import EventBatch
from mysqlcdc.transforms.events import (ENVELOPE_NAMES, Kept, Untouched, from_events,
                                        plain_event, to_events)
from mysqlcdc.transforms.loader import resolve

__all__ = ["PythonTransform"]

_FUNCTIONS: dict[str, tuple[Callable, bool]] = {}   # per worker: path -> (function, helpers?)


def _function(path: str) -> tuple[Callable, bool]:
    hit = _FUNCTIONS.get(path)
    if hit is None:
        fn = resolve(path, "python transform")
        if not callable(fn):
            from mysqlcdc.errors import ConfigError

            raise ConfigError(f"python transform {path!r} is not a function")
        hit = _FUNCTIONS[path] = (fn, _takes_helpers(fn))
    return hit


def _takes_helpers(fn: Callable) -> bool:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2


class PythonTransform(Transform):
    kind = "python"

    def __init__(self, function: str | None = None, batch_function: str | None = None,
                 on_error: str = "fail", columns: dict[str, pa.DataType] | None = None,
                 typed: bool = True, ops: tuple[str, ...] = ("c", "u", "d", "r")) -> None:
        self.function, self.batch_function = function, batch_function
        self.ops = frozenset(ops)
        self.on_error = on_error
        self._columns = dict(columns or {})
        self.typed = typed

    def columns(self) -> dict[str, pa.DataType]:
        return dict(self._columns)

    def describe(self) -> str:
        return f"{self.label or 'python'} {self.function or self.batch_function}"

    def open(self, ctx: TransformContext) -> None:
        _function(self.function or self.batch_function)   # import errors surface at once

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        if not events.num_rows:
            return events
        batch = events.to_batch()
        if self.batch_function:
            return EventBatch(self._batch(batch, ctx))
        return EventBatch(self._per_event(batch, ctx))

    # --- per event ------------------------------------------------------------

    def _per_event(self, batch: pa.RecordBatch, ctx: TransformContext) -> pa.RecordBatch:
        fn, with_helpers = _function(self.function)
        definitions = ctx.definitions if self.typed else None
        schema = batch.schema
        for name, typ in self._columns.items():
            if name not in schema.names:
                schema = schema.append(pa.field(name, typ))
        kept = Kept()
        events = to_events(batch, definitions, kept=kept)
        names = set(schema.names)
        out: list[dict[str, Any]] = []
        for i, event in enumerate(events):
            if event["op"] not in self.ops:   # not for this function: passes as it came
                out.append(Untouched(batch.slice(i, 1).to_pylist()[0]))
                continue
            try:
                result = fn(event, ctx.helpers) if with_helpers else fn(event)
                produced = _results(result, event, names)
                out.extend(produced)
            except Exception as exc:   # noqa: BLE001 - user code: every failure is handled
                self._failed(ctx, batch.slice(i, 1).to_pylist()[0], exc, _user_traceback(exc))
        try:
            return from_events(out, schema, definitions, kept)
        except TransformResultError:
            return self._encode_one_by_one(out, schema, ctx, definitions)

    def _encode_one_by_one(self, out, schema, ctx, definitions) -> pa.RecordBatch:
        """Some output event cannot be encoded: find which, handle each (fail/dead letter)."""
        good = []
        for event in out:
            try:
                from_events([event], schema, definitions)
                good.append(event)
            except TransformResultError as exc:
                self._failed(ctx, _as_row(event), exc, "")
        return from_events(good, schema, definitions)

    def _failed(self, ctx: TransformContext, row: dict, exc: BaseException, tb: str) -> None:
        if isinstance(exc, TransformResultError):
            tb = ""                       # ours, not the user's: the message says it all
        if self.on_error == "dead_letter":
            ctx.dead_letter(plain_event(row), self.describe(), exc, tb)
            return
        where = (f"{row.get('db')}.{row.get('table')} key {row.get('key')} at "
                 f"{row.get('file')}:{row.get('pos')} row {row.get('row')} "
                 f"(seq {row.get('seq')}, batch {ctx.batch_id})")
        if isinstance(exc, TransformResultError):
            raise TransformResultError(f"{self.describe()} on {where} {exc.message}") from None
        raise TransformError(f"{self.describe()} failed on {where}: {type(exc).__name__}: {exc}",
                             detail=tb) from None

    # --- per batch --------------------------------------------------------------

    def _batch_schema(self, schema: pa.Schema) -> pa.Schema:
        for name, typ in self._columns.items():
            if name not in schema.names:
                schema = schema.append(pa.field(name, typ))
        return schema

    def _batch(self, batch: pa.RecordBatch, ctx: TransformContext) -> pa.RecordBatch:
        fn, with_helpers = _function(self.batch_function)
        try:
            result = fn(batch, ctx.helpers) if with_helpers else fn(batch)
            return _conform(result, self._batch_schema(batch.schema))
        except Exception as exc:   # noqa: BLE001 - user code
            tb = _user_traceback(exc) if not isinstance(exc, TransformResultError) else ""
            text = exc.message if isinstance(exc, TransformResultError) else str(exc)
            if self.on_error == "dead_letter":
                for row in batch.to_pylist():
                    ctx.dead_letter(plain_event(row), self.describe(), exc, tb)
                return pa.RecordBatch.from_pylist([], schema=batch.schema)
            first = batch.slice(0, 1).to_pylist()[0]
            where = (f"a batch of {batch.num_rows} events from {first.get('file')}:"
                     f"{first.get('pos')} (batch {ctx.batch_id})")
            if isinstance(exc, TransformResultError):
                raise TransformResultError(f"{self.describe()} on {where} {text}") from None
            raise TransformError(f"{self.describe()} failed on {where}: {type(exc).__name__}: "
                                 f"{text}", detail=tb) from None


def _results(result: Any, event: dict, names: set[str]) -> list[dict]:
    if result is None:
        return []
    items = result if isinstance(result, list) else [result]
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise TransformResultError(f"returned a {type(item).__name__}; expected an event "
                                       "dict, a list of them or None")
        unknown = set(item) - names
        if unknown:
            raise TransformResultError(f"returned unknown field(s) {sorted(unknown)}; declare new "
                                       "columns with `columns:` in the transform's config")
        if item is not event:
            item = {**event, **item}
        out.append(item)
    return out


def _as_row(event: dict) -> dict:
    return {k: (v if not isinstance(v, (dict, list)) else str(v)) for k, v in event.items()
            if k in ENVELOPE_NAMES}


def _conform(result: Any, schema: pa.Schema) -> pa.RecordBatch:
    if isinstance(result, pa.Table):
        result = result.combine_chunks().to_batches()[0] if result.num_rows else \
            pa.RecordBatch.from_pylist([], schema=schema)
    if not isinstance(result, pa.RecordBatch):
        raise TransformResultError(f"returned a {type(result).__name__}; expected a "
                                   "pyarrow.RecordBatch")
    missing = [n for n in schema.names if n not in result.schema.names]
    if missing:
        raise TransformResultError(f"returned a batch without column(s) {missing}")
    try:
        return pa.RecordBatch.from_arrays([result.column(f.name).cast(f.type) for f in schema],
                                          schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise TransformResultError(f"returned columns of the wrong type: {err}") from None


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the user's frames on (this module's frames left out)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))

