"""How far behind a pipeline is and how long its binlog will last: the numbers behind
``/metrics``, the dashboard and the runway warning, for ``serve`` and ``run`` alike.

* **bytes behind**: binlog bytes from the pipeline's position to the server's end.
* **seconds behind**: now minus the commit time of the last transaction the pipeline
  has read (the offsets carry it as ``ts``); 0 when it stands at the server's end. On a
  quiet server that is at most a heartbeat interval when it keeps up.
* **binlog runway**: how long until the server purges the oldest binlog file the
  pipeline still needs. A server purges a file ``binlog_expire_logs_seconds`` (or
  ``expire_logs_days``) after its last write, which is when the next file was created
  (that file's FORMAT_DESCRIPTION timestamp, recorded by the pipeline in ``source.json``).
  The file being written is not purged before it is closed: its runway is at least the
  whole expiry. Purging happens at rotations and restarts, so the real end comes at the
  first of those after the time shown, never before it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from mysqlcdc.protocol.connection import query
from mysqlcdc.protocol.retry import format_duration
from mysqlcdc.types import BinlogPosition

__all__ = ["Runway", "expire_seconds", "binlog_runway", "bytes_behind", "seconds_behind",
           "file_births", "RunwayWarning"]

log = logging.getLogger("mysqlcdc.runway")


@dataclass(frozen=True)
class Runway:
    needed: str                   # the oldest binlog file the pipeline still needs
    seconds: float | None         # time left before it is purged; None: never by age
    expire_s: float | None        # the server's expiry; None: none
    basis: str                    # how ``seconds`` was found, for people


def expire_seconds(conn) -> float | None:
    """The server's binlog expiry in seconds (None: binlogs are not purged by age)."""
    rows = query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                       "('binlog_expire_logs_seconds', 'expire_logs_days')")
    v = {str(k).lower(): str(val) for k, val in rows}
    seconds = float(v.get("binlog_expire_logs_seconds") or 0)
    if seconds > 0:
        return seconds
    days = float(v.get("expire_logs_days") or 0)
    return days * 86400 if days > 0 else None


def file_births(state_folder: str | Path | None) -> dict[str, int]:
    """Binlog file -> its creation time, as the pipeline recorded them in source.json."""
    path = None if state_folder is None else Path(state_folder) / "source.json"
    if path is None or not path.is_file():
        return {}
    try:
        return {str(k): int(v) for k, v in (json.loads(path.read_text()).get("files") or {}).items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def binlog_runway(logs: list[tuple[str, int]], needed: str, births: dict[str, int],
                  expire_s: float | None, now: float | None = None) -> Runway:
    now = time.time() if now is None else now
    if expire_s is None:
        return Runway(needed, None, None, "the server does not purge binlogs by age")
    names = [name for name, _ in logs]
    if needed not in names:
        return Runway(needed, 0.0, expire_s, f"{needed} is no longer on the server")
    index = names.index(needed)
    if index == len(names) - 1:
        return Runway(needed, expire_s, expire_s,
                      f"{needed} is being written; purged no sooner than {format_duration(expire_s)} "
                      "after it is closed")
    closed = births.get(names[index + 1])
    basis = f"{needed} was closed when {names[index + 1]} was created"
    if closed is None:
        closed = births.get(needed)
        basis = f"{needed} was created at that time (a lower bound: its closing is not known)"
    if closed is None:
        return Runway(needed, None, expire_s, f"the creation times of {needed} and the file "
                                              "after it are not known yet")
    return Runway(needed, closed + expire_s - now, expire_s, basis)


def bytes_behind(logs: list[tuple[str, int]], position: BinlogPosition) -> int | None:
    """Binlog bytes from ``position`` to the end (None: its file is not on the server)."""
    behind, counting = 0, False
    for name, size in logs:
        if name == position.file:
            behind, counting = max(0, size - position.pos), True
        elif counting:
            behind += size
    return behind if counting else None


def seconds_behind(last_ts_ms: int | None, behind: int | None, now: float | None = None) -> float | None:
    """Now minus the last read transaction's commit time; 0 at the server's end."""
    if behind == 0:
        return 0.0
    if last_ts_ms is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, now - last_ts_ms / 1000)


class RunwayWarning:
    """One log line when a pipeline's runway drops under its threshold (and one when it
    is back over), never one per check."""

    def __init__(self) -> None:
        self._low: set[str] = set()

    def check(self, pipeline: str, runway: Runway, threshold_s: float) -> bool:
        low = runway.seconds is not None and runway.seconds < threshold_s
        if low and pipeline not in self._low:
            self._low.add(pipeline)
            log.warning("pipeline %s: binlog runway %s: %s, which it still needs, is purged "
                        "by the server's expiry (%s) %s; catch up, or raise "
                        "binlog_expire_logs_seconds", pipeline,
                        format_duration(max(0.0, runway.seconds)), runway.needed,
                        format_duration(runway.expire_s or 0),
                        "already" if runway.seconds <= 0 else
                        "around " + time.strftime("%Y-%m-%d %H:%M UTC",
                                                  time.gmtime(time.time() + runway.seconds)))
        elif not low and pipeline in self._low:
            self._low.discard(pipeline)
            log.warning("pipeline %s: binlog runway back over %s", pipeline,
                        format_duration(threshold_s))
        return low


def pipeline_runway(cfg, conn=None) -> Runway | None:
    """The runway of ``cfg``'s oldest needed binlog file (None: no position yet)."""
    from mysqlcdc.capture.server import list_binlogs
    from mysqlcdc.pipeline.runner import (checkpointed_position, connection_settings,
                                          schema_history_dir)
    from mysqlcdc.protocol.connection import connect_sql

    position = checkpointed_position(cfg)
    if position is None:
        return None
    births: dict[str, int] = {}
    for index in range(len(cfg.sinks)):
        births.update(file_births(schema_history_dir(cfg, index)))
    own = conn is None
    conn = conn or connect_sql(connection_settings(cfg))
    try:
        return binlog_runway(list_binlogs(conn), position.file, births, expire_seconds(conn))
    finally:
        if own:
            conn.close()


def runway_watch(cfg, every_s: float = 60.0):
    """A callable for a run loop: checks the runway at most every ``every_s`` and logs
    the warning line when it is under ``source.runway_warning``."""
    from mysqlcdc.config.fields import duration_seconds
    from mysqlcdc.errors import MysqlcdcError

    warning, threshold = RunwayWarning(), duration_seconds(cfg.source.runway_warning)
    due = [0.0]

    def tick() -> None:
        if time.monotonic() < due[0]:
            return
        due[0] = time.monotonic() + every_s
        try:
            runway = pipeline_runway(cfg)
        except MysqlcdcError as err:
            log.debug("binlog runway of %s unknown: %s", cfg.name, err.message)
            return
        if runway is not None:
            warning.check(cfg.name, runway, threshold)
    return tick
