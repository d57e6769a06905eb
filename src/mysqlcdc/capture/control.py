"""Requests to a stream, left as files in its state folder (``mysqlcdc-schema`` beside
the Spark checkpoint of each sink), and read by the driver-side reader.

``paused``     while it exists the reader plans no new micro-batch (the query stays up,
               nothing is read); ``resume`` removes it.
``seek.json``  a seek (or a failover to another server, which is a seek by GTID set):
               the next micro-batch is an empty *seek batch* whose end offset is the
               requested position, so Spark's own checkpoint records the jump like any
               other batch and every sink's per-batch idempotence keeps working (batch ids
               go on counting). Once a batch starting at the position was planned the
               request is moved to ``seek-done/``. A pipeline without a checkpoint yet
               simply starts there.

Both are written by ``mysqlcdc.pipeline.control`` while the pipeline is stopped (seek)
or running (pause); the reader only reads them and retires a consumed seek.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from mysqlcdc.types import BinlogPosition

__all__ = ["SeekRequest", "StreamControl", "PAUSED", "SEEK"]

PAUSED = "paused"
SEEK = "seek.json"
SEEK_DONE = "seek-done"


@dataclass(frozen=True)
class SeekRequest:
    """Where the next micro-batch starts. ``history``: ``keep`` (the schema history
    stays; a forward seek walks the skipped range for DDL) or ``reset`` (the history was
    moved aside and starts again at the position, as for a new pipeline)."""

    id: str
    file: str
    pos: int
    gtid: str | None = None
    ts: int | None = None
    epoch: int = 0
    history: str = "keep"
    reason: str = "seek"             # seek | failover
    requested_at: float = 0.0

    @classmethod
    def new(cls, position: BinlogPosition, **kw) -> "SeekRequest":
        return cls(uuid.uuid4().hex[:12], position.file, position.pos,
                   requested_at=time.time(), **kw)

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition.of(self.file, self.pos)

    def offset(self) -> dict:
        """The seek batch's end offset (key order fixed: Spark compares the JSON text)."""
        out: dict = {"file": self.file, "pos": self.pos}
        if self.gtid is not None:
            out["gtid"] = self.gtid
        if self.ts is not None:
            out["ts"] = self.ts
        if self.epoch:
            out["epoch"] = self.epoch
        out["seek"] = self.id
        return out


class StreamControl:
    """The request files of one stream's state folder."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    def paused(self) -> bool:
        return (self.folder / PAUSED).exists()

    def set_paused(self, paused: bool) -> None:
        path = self.folder / PAUSED
        if paused:
            self.folder.mkdir(parents=True, exist_ok=True)
            path.write_text(f"paused at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        else:
            path.unlink(missing_ok=True)

    def pending_seek(self) -> SeekRequest | None:
        path = self.folder / SEEK
        if not path.is_file():
            return None
        try:
            return SeekRequest(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            return None

    def request_seek(self, request: SeekRequest) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / (SEEK + ".tmp")
        tmp.write_text(json.dumps(asdict(request)))
        os.replace(tmp, self.folder / SEEK)

    def retire_seek(self, request: SeekRequest) -> None:
        """The request took effect: keep it in ``seek-done/`` for the record."""
        path = self.folder / SEEK
        current = self.pending_seek()
        if current is None or current.id != request.id:
            return
        done = self.folder / SEEK_DONE
        done.mkdir(exist_ok=True)
        try:
            os.replace(path, done / f"{request.id}.json")
        except FileNotFoundError:
            pass

    def cancel_seek(self) -> None:
        (self.folder / SEEK).unlink(missing_ok=True)
