"""Calling the plugins of one sink, batch by batch, in binlog order.

The sink is a ``foreachBatch`` on the driver: the micro-batch comes in as Arrow (its
size is bounded by ``max_events_per_batch``), is sorted by ``seq`` and walked once.
Consecutive rows with one ``txn_id`` are a transaction (offsets sit on transaction
boundaries, so none spans two batches).

The counters (last trx_id, last gsn) are kept per batch in
``<checkpoint>/plugins/state-<batch>.json``: batch N starts from the newest state of a
batch before N, so a replayed batch numbers its transactions and rows exactly as the
first attempt did, and a restart continues the numbering.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import traceback
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.envelope.model import OP_DELETE, OP_INSERT, OP_READ, OP_ROLLBACK, OP_UPDATE
from mysqlcdc.envelope.values import image_decoder
from mysqlcdc.errors import PluginError
from mysqlcdc.schema.history import SchemaHistory
from mysqlcdc.sinks.plugins.plugin import PluginContext
from mysqlcdc.sinks.plugins.settings import PluginsSettings
from mysqlcdc.types import BinlogPosition

__all__ = ["PluginRunner", "Counters"]

log = logging.getLogger(__name__)
_ROW_CALLS = {OP_INSERT: ("insert",), OP_READ: ("insert",), OP_DELETE: ("delete",),
              OP_UPDATE: ("update_before", "update_after")}


class Counters:
    """The last trx_id and gsn handed out, per batch, in a folder of small JSON files."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def before(self, batch_id: int) -> tuple[int, int]:
        """(trx_id, gsn) at the end of the newest batch before ``batch_id`` ((0, 0): none)."""
        done = sorted((int(p.stem.split("-")[1]), p) for p in self.folder.glob("state-*.json")
                      if p.stem.split("-")[1].isdigit())
        older = [p for n, p in done if n < batch_id]
        if not older:
            return 0, 0
        data = json.loads(older[-1].read_text())
        return int(data["trx_id"]), int(data["gsn"])

    def save(self, batch_id: int, trx_id: int, gsn: int) -> None:
        path = self.folder / f"state-{batch_id:012d}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"batch_id": batch_id, "trx_id": trx_id, "gsn": gsn}))
        os.replace(tmp, path)
        for old in self.folder.glob("state-*.json"):
            stem = old.stem.split("-")[1]
            if stem.isdigit() and int(stem) < batch_id - 1:
                old.unlink(missing_ok=True)


class PluginRunner:
    """One sink's plugin instances, their context and counters."""

    def __init__(self, settings: PluginsSettings) -> None:
        self.settings = settings
        self.counters = Counters(settings.state_dir)
        self.history = SchemaHistory(settings.history_dir) if settings.history_dir else None
        self.ctx = PluginContext(config=settings.config, options=dict(settings.options),
                                 helpers=settings.helpers, pipeline=settings.pipeline,
                                 logger=logging.getLogger(f"mysqlcdc.plugins.{settings.pipeline}"))
        self.plugins = [(path, cls()) for path, cls in settings.classes]
        self._decoders: dict[tuple, Callable] = {}
        self.closed = False
        self._closing = threading.Lock()
        self._call_all("init", (self.ctx,), None)

    def deinit(self) -> None:
        """Once, whoever calls first: the query's listener or the pipeline that stopped it."""
        with self._closing:
            if self.closed:
                return
            self.closed = True
        self._call_all("deinit", (), None)

    # --- one batch --------------------------------------------------------------

    def run_batch(self, batch_id: int, table: pa.Table) -> None:
        """Every callback of one micro-batch, in seq order; then the counters are saved."""
        self.ctx.batch_id = batch_id
        if self.history is not None:
            self.history.reload()
            self._decoders.clear()
        trx_id, gsn = self.counters.before(batch_id)
        if table.num_rows:
            table = table.take(pc.sort_indices(table, [("seq", "ascending")]))
            trx_id, gsn = self._walk(table, trx_id, gsn)
        self.counters.save(batch_id, trx_id, gsn)

    def _walk(self, table: pa.Table, trx_id: int, gsn: int) -> tuple[int, int]:
        current, open_trx, hwm = object(), False, gsn
        for batch in table.to_batches(max_chunksize=4096):
            for event in batch.to_pylist():
                if event["txn_id"] != current:
                    if open_trx:
                        self._call_all("commit_trx", (trx_id, gsn), event)
                    current, open_trx, hwm = event["txn_id"], False, gsn
                op = event["op"]
                if op == OP_ROLLBACK:
                    if open_trx:
                        self._call_all("rollback_trx", (trx_id,), event)
                        open_trx = False
                    continue
                calls = _ROW_CALLS.get(op)
                if calls is None:
                    continue                      # schema changes and truncates
                if not open_trx:
                    trx_id, open_trx = trx_id + 1, True
                    self._call_all("begin_trx", (trx_id, hwm), event)
                for name in calls:
                    gsn += 1
                    row = self._row(event, "before" if name in ("delete", "update_before")
                                    else "after")
                    self._call_all(name, (row, event["db"], event["table"], trx_id, gsn), event)
        if open_trx:
            self._call_all("commit_trx", (trx_id, gsn), None)
        return trx_id, gsn

    def _row(self, event: dict, side: str) -> dict | None:
        text = event.get(side)
        if text is None:
            return None
        image = orjson.loads(text)
        return self._decoder(event)(image) if isinstance(image, dict) else image

    def _decoder(self, event: dict) -> Callable:
        if self.history is None:
            return lambda image: image
        key = (event["db"], event["table"], event["file"], event["pos"])
        fn = self._decoders.get(key)
        if fn is None:
            definition = self.history.definition(event["db"], event["table"],
                                                 BinlogPosition.of(event["file"], event["pos"]))
            fn = self._decoders[key] = image_decoder(definition)
        return fn

    def _call_all(self, name: str, args: tuple, event: dict | None) -> None:
        if event is not None:
            self.ctx.event = _plain(event)
        for path, plugin in self.plugins:
            method = getattr(plugin, name, None)
            if method is None:
                continue
            try:
                method(*args)
            except Exception as exc:   # noqa: BLE001 - user code: every failure is named
                raise PluginError(_where(path, name, event, self.ctx.batch_id, exc),
                                  detail=_user_traceback(exc)) from None


def _plain(event: dict[str, Any]) -> dict[str, Any]:
    out = dict(event)
    if isinstance(out.get("seq"), Decimal):
        out["seq"] = int(out["seq"])
    return out


def _where(path: str, name: str, event: dict | None, batch_id: int, exc: Exception) -> str:
    at = ""
    if event is not None:
        at = (f" on {event.get('db')}.{event.get('table')} key {event.get('key')} at "
              f"{event.get('file')}:{event.get('pos')} (seq {event.get('seq')})")
    return f"plugin {path}: {name}(){at} in batch {batch_id} raised {type(exc).__name__}: {exc}"


def _user_traceback(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))
