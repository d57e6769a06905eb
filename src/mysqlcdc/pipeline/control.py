"""Pause, resume and seek a pipeline: requests left in each sink's state folder
(``capture.control``), read by the stream's driver-side reader.

A **pause** keeps the queries up and plans no new micro-batch until **resume**.
A **seek** (of a stopped pipeline) makes the next micro-batch an empty *seek batch*
ending at the new position, recorded in Spark's checkpoint like any batch: batch ids go
on counting, so every sink's replay protection stays valid, and a crash at any point
resumes either before the seek (it is then planned again) or after it. Forward skips the
changes in between (their DDL still reaches the schema history); backward replays them.
The caller must say which it expects (``confirm``). A batch Spark planned but did not
commit before the stop is replayed first, from where it was planned.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from mysqlcdc.capture.control import SeekRequest, StreamControl
from mysqlcdc.capture.positions import PositionFinder
from mysqlcdc.capture.server import current_position, earliest_position, list_binlogs
from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import BinlogPurgedError, ConfigError, SeekError, SeekNotConfirmedError
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.protocol.connection import connect_sql
from mysqlcdc.schema.history import HISTORY_FILE
from mysqlcdc.spark.checkpoint import local_dir, offset_data, planned_batches
from mysqlcdc.types import BinlogPosition, StartTimestamp, parse_start

__all__ = ["SeekPlan", "state_folders", "set_paused", "is_paused", "seek", "pending_seeks",
           "latest_offset_data", "archive_history"]


@dataclass
class SeekPlan:
    """What a seek did (or would do): where to, and where each sink stood."""

    to: str
    gtid: str | None
    direction: str                     # skip | replay | none | start
    sinks: list[dict] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"to": self.to, "gtid": self.gtid, "direction": self.direction,
                "sinks": self.sinks}


def state_folders(cfg: PipelineConfig) -> list[Path]:
    """Each sink's state folder (``mysqlcdc-schema`` beside its Spark checkpoint)."""
    from mysqlcdc.pipeline.runner import schema_history_dir, sink_checkpoint

    out = []
    for index in range(len(cfg.sinks)):
        folder = schema_history_dir(cfg, index)
        if folder is None:
            raise SeekError(f"sink {index}'s checkpoint {sink_checkpoint(cfg, index)} is not a "
                            "local folder: pause and seek keep their requests beside it",
                            hint="Use a local (or file://) spark.checkpoint.")
        out.append(Path(folder))
    return out


def set_paused(cfg: PipelineConfig, paused: bool) -> None:
    for folder in state_folders(cfg):
        StreamControl(folder).set_paused(paused)


def is_paused(cfg: PipelineConfig) -> bool:
    try:
        return any(StreamControl(f).paused() for f in state_folders(cfg))
    except SeekError:
        return False


def pending_seeks(cfg: PipelineConfig) -> list[SeekRequest]:
    try:
        return [s for f in state_folders(cfg) if (s := StreamControl(f).pending_seek())]
    except SeekError:
        return []


def latest_offset_data(cfg: PipelineConfig, index: int) -> dict | None:
    """Sink ``index``'s newest planned offset as stored (None: no checkpoint yet)."""
    from mysqlcdc.pipeline.runner import sink_checkpoint

    local = local_dir(sink_checkpoint(cfg, index))
    if local is None:
        return None
    for batch in planned_batches(local):
        data = offset_data(local, batch)
        if data is not None:
            return data
    return None


def archive_history(folder: Path, why: str) -> None:
    """Move the schema history aside: the stream bootstraps a new one where it goes next."""
    path = folder / HISTORY_FILE
    if path.exists():
        path.rename(folder / f"{HISTORY_FILE}.{why}-{time.strftime('%Y%m%d-%H%M%S')}")


def _history_start(folder: Path) -> BinlogPosition | None:
    """Where the schema history of a sink begins (its bootstrap position)."""
    path = folder / HISTORY_FILE
    if not path.is_file():
        return None
    found = None
    with path.open() as lines:
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "bootstrap" and rec.get("pos"):
                pos = BinlogPosition.of(rec["pos"]["file"], int(rec["pos"]["pos"]))
                found = pos if found is None else min(found, pos)
    return found


def _resolve(cfg: PipelineConfig, spec: str) -> tuple[BinlogPosition, str | None]:
    """The target on the configured server, and the GTID set before it."""
    from mysqlcdc.pipeline.runner import connection_settings, retry_policy

    try:
        value = parse_start(spec)
    except ValueError as err:
        raise ConfigError(f"seek target: {err}") from None
    settings = connection_settings(cfg)
    conn = connect_sql(settings)
    try:
        finder = PositionFinder(settings, cfg.source.server_id, lambda: conn, retry_policy(cfg))
        if isinstance(value, GtidSet):
            return finder.resolve_gtid(value)[0], str(value)
        if isinstance(value, StartTimestamp):
            position = finder.resolve_timestamp(value.ms)
        elif value == "earliest":
            position = earliest_position(conn)
        elif value == "latest":
            position = current_position(conn)
        else:
            position = value
            sizes = dict(list_binlogs(conn))
            if position.file not in sizes or position.pos > sizes[position.file]:
                raise BinlogPurgedError(f"seek target {position} is not in the binlog of "
                                        f"{settings.address}")
        return position, str(finder.gtid_at(position))
    finally:
        conn.close()


def seek(cfg: PipelineConfig, spec: str, confirm: str | None) -> SeekPlan:
    """Request a seek of a stopped pipeline to ``spec`` (FILE:POS, GTID set, timestamp,
    earliest, latest). Raises SeekNotConfirmedError when ``confirm`` is not the direction
    the seek goes for some sink (``skip`` forward, ``replay`` backward)."""
    folders = state_folders(cfg)
    target, gtid = _resolve(cfg, spec)
    plans = []
    for index, folder in enumerate(folders):
        at = latest_offset_data(cfg, index)
        here = None if at is None else BinlogPosition.of(at["file"], int(at["pos"]))
        direction = ("start" if here is None else "skip" if target > here
                     else "replay" if target < here else "none")
        begins = _history_start(folder)
        history = "reset" if begins is not None and target < begins else "keep"
        plans.append({"sink": index, "from": None if here is None else str(here),
                      "direction": direction, "history": history,
                      "epoch": int((at or {}).get("epoch", 0))})
    directions = {p["direction"] for p in plans}
    required = "skip" if "skip" in directions else "replay" if "replay" in directions else None
    plan = SeekPlan(str(target), gtid, required or plans[0]["direction"], plans)
    if required is not None and confirm != required:
        moves = "; ".join(f"sink {p['sink']} from {p['from']}" for p in plans
                          if p["direction"] == required)
        what = ("skips every change in between (never delivered)" if required == "skip"
                else "replays every change in between (delivered again)")
        raise SeekNotConfirmedError(f"seeking {cfg.name} to {target} {what}: {moves}; "
                                    f"confirm with {required!r}")
    for p, folder in zip(plans, folders):
        if p["history"] == "reset":
            archive_history(folder, "seek")
        StreamControl(folder).request_seek(SeekRequest.new(
            target, gtid=gtid, epoch=p["epoch"], history=p["history"], reason="seek"))
    return plan


def drop_uncommitted(checkpoint: Path) -> list[int]:
    """Move the offsets of batches Spark planned but never committed aside (a failover:
    their positions belong to the old server); Spark plans those batch ids again."""
    from mysqlcdc.spark.checkpoint import committed_batches

    done = committed_batches(checkpoint)
    last = done[0] if done else -1
    moved = []
    aside = checkpoint / "mysqlcdc-superseded"
    for batch in planned_batches(checkpoint):
        if batch > last:
            aside.mkdir(exist_ok=True)
            shutil.move(str(checkpoint / "offsets" / str(batch)),
                        str(aside / f"offsets-{batch}-{int(time.time())}"))
            moved.append(batch)
    return moved
