"""Signals: on-demand snapshot requests written as rows of a table in the source.

A running pipeline is asked to snapshot a table (a key range, a filtered set) by a row
inserted into its *signal table* (``source.snapshot.signal_table``, by default
``mysqlcdc.mysqlcdc_signal``), by hand or by ``mysqlcdc snapshot``. The columns follow
Debezium's signalling table::

    CREATE TABLE mysqlcdc.mysqlcdc_signal (
      id   VARCHAR(64) PRIMARY KEY,    -- any unique text
      type VARCHAR(32) NOT NULL,       -- execute-snapshot | stop-snapshot
      data TEXT NULL                   -- JSON, below
    );
    INSERT INTO mysqlcdc.mysqlcdc_signal VALUES (UUID(), 'execute-snapshot',
      '{"data-collections": ["shop.orders"],
        "additional-conditions": [{"data-collection": "shop.orders", "filter": "id < 1000"}]}');

``data`` may also name a ``"pipeline"``: only that pipeline acts (``mysqlcdc snapshot``
sets it); otherwise every pipeline capturing the table does. ``stop-snapshot`` drops the
named (or all) backfills not yet read.

The signal is read from the binlog like any row, so it is ordered with the data. The
read tasks that decode it (``SignalTap``) write it to a file named by its binlog
position in ``<schema history>/signals/``; the driver takes the files of committed
batches into the next offset (``capture.backfill``), where the request then lives:
resumable and replayed identically. A signal row is not itself an output row unless
the table is also captured.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.types import binlog_file_number

__all__ = ["SIGNAL_DDL", "SignalTap", "Signal", "read_signals", "forget_signals",
           "parse_requests", "Request", "signal_folder", "request_snapshot", "put_signal"]

log = logging.getLogger(__name__)

SIGNAL_DDL = ("CREATE TABLE IF NOT EXISTS {table} (id VARCHAR(64) NOT NULL PRIMARY KEY, "
              "type VARCHAR(32) NOT NULL, data TEXT NULL)")
_FOLDER = "signals"


def signal_folder(schema_history: str) -> Path:
    return Path(schema_history) / _FOLDER


@dataclass(frozen=True)
class SignalTap:
    """Wraps a read task's batches: the signal table's inserts are written as files and
    left out of the output (kept when ``keep``: the user captures that table too)."""

    db: str
    table: str
    folder: str
    keep: bool = False

    def tap(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if not len(batch):
                yield batch
                continue
            mine = pc.and_(pc.equal(batch.column("table"), self.table),
                           pc.equal(batch.column("db"), self.db))
            if not pc.any(mine).as_py():
                yield batch
                continue
            self._write(batch.filter(mine))
            if self.keep:
                yield batch
            else:
                rest = batch.filter(pc.invert(mine))
                if len(rest):
                    yield rest

    def _write(self, rows: pa.RecordBatch) -> None:
        folder = Path(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        for r in rows.to_pylist():
            if r["op"] != "c" or r["after"] is None:
                continue                     # only inserted rows are requests
            put_signal(folder, (binlog_file_number(r["file"]), r["pos"], r["row"]),
                 {"file": r["file"], "pos": r["pos"], "row": r["row"],
                  "row_image": json.loads(r["after"])})


def request_snapshot(folder: Path, at: tuple[int, int], request_id: str,
                     tables: list[str], where: str | None = None, row: int = 0) -> None:
    """A snapshot request of mysqlcdc's own at binlog position ``at`` (file number, pos),
    written as a signal read there would be: taken, like one, once the batch that holds
    ``at`` is committed. Written once: a replayed batch finds it there. ``where``: only
    the rows it selects; ``row``: tells several requests at one position apart."""
    folder.mkdir(parents=True, exist_ok=True)
    data: dict = {"data-collections": tables}
    if where:
        data["additional-condition"] = where
    put_signal(folder, (at[0], at[1], row), {"row_image": {
        "id": request_id, "type": "execute-snapshot", "data": json.dumps(data)}})


def put_signal(folder: Path, key: tuple[int, int, int], record: dict) -> None:
    """A signal's file, named by its binlog order; written once (a replayed batch finds
    it there), whole or not at all."""
    name = f"{key[0]:08d}.{key[1]:012d}.{key[2]:06d}.json"
    path = folder / name
    if path.exists():
        return
    tmp = folder / (name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


@dataclass(frozen=True)
class Signal:
    key: tuple[int, int, int]        # (file number, pos, row): the binlog order
    id: str
    type: str
    data: dict


def read_signals(folder: Path, after: tuple[int, int, int] | None,
                 before: tuple[int, int, int]) -> list[Signal]:
    """The signals with ``after < key < before``, in binlog order."""
    if not folder.is_dir():
        return []
    out = []
    for path in folder.glob("*.json"):
        try:
            key = tuple(int(p) for p in path.name[:-5].split("."))
        except ValueError:
            continue
        if len(key) != 3 or not key < before or (after is not None and not key > tuple(after)):
            continue
        try:
            image = json.loads(path.read_text())["row_image"]
        except (OSError, ValueError, KeyError):
            log.error("signal file %s is unreadable; ignored", path)
            continue
        out.append(_signal(key, image))
    return sorted(out, key=lambda s: s.key)


def forget_signals(folder: Path, through: tuple[int, int, int] | None) -> None:
    """Delete the files of signals up to ``through``: an offset already logged holds them."""
    if through is None or not folder.is_dir():
        return
    for path in folder.glob("*.json"):
        try:
            if tuple(int(p) for p in path.name[:-5].split(".")) <= tuple(through):
                path.unlink()
        except (ValueError, OSError):
            continue


def _signal(key: tuple, image: dict) -> Signal:
    raw = image.get("data")
    try:
        data = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        data = {"_invalid": raw}
    if not isinstance(data, dict):
        data = {"_invalid": raw}
    return Signal(key, str(image.get("id")), str(image.get("type") or ""), data)


@dataclass(frozen=True)
class Request:
    """What a signal asks of this pipeline: ``action`` ``snapshot`` a table (``where``
    filters its rows) or ``stop`` the pending backfills of ``table`` (None: all)."""

    action: str
    table: str | None
    where: str | None
    id: str


def parse_requests(signal: Signal, pipeline: str | None) -> tuple[list[Request], str | None]:
    """The requests of one signal, and why it is refused (None: it is not)."""
    data = signal.data
    if "_invalid" in data:
        return [], f"its data is not a JSON object: {str(data['_invalid'])[:200]!r}"
    target = data.get("pipeline")
    if target is not None and pipeline is not None and target != pipeline:
        return [], None                     # for another pipeline: not ours, not an error
    tables = data.get("data-collections") or []
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        return [], "data-collections must be a list of \"db.table\" names"
    if signal.type == "stop-snapshot":
        return [Request("stop", t, None, signal.id) for t in tables] or \
            [Request("stop", None, None, signal.id)], None
    if signal.type != "execute-snapshot":
        return [], f"unknown signal type {signal.type!r} (execute-snapshot, stop-snapshot)"
    if not tables:
        return [], "execute-snapshot names no table in data-collections"
    filters = _filters(data)
    if isinstance(filters, str):
        return [], filters
    return [Request("snapshot", t, filters.get(t, filters.get("*")), signal.id)
            for t in tables], None


def _filters(data: dict) -> dict[str, str] | str:
    """``additional-conditions`` per table (``additional-condition``: for all)."""
    out: dict[str, str] = {}
    one = data.get("additional-condition")
    if isinstance(one, str) and one.strip():
        out["*"] = one
    for item in data.get("additional-conditions") or []:
        if not isinstance(item, dict) or not isinstance(item.get("data-collection"), str) \
                or not isinstance(item.get("filter"), str):
            return "additional-conditions entries need \"data-collection\" and \"filter\""
        if item["filter"].strip():
            out[item["data-collection"]] = item["filter"]
    return out
