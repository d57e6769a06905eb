"""Sinks that write inside the source's own read tasks (DESIGN.md decision 20).

A sink whose output is files (the changelog) does not need its rows in the JVM: the read
task that decoded them can write them. Such a sink hands the source a *task writer*, a
picklable object with

* ``ddl``: the Spark schema of what it yields;
* ``write(batches) -> Iterator[pyarrow.RecordBatch]``: consumes the task's envelope
  batches (after the transforms the task runs) and yields a few rows describing what
  it wrote (for the changelog: one row per file).

It travels like the transforms' chain: pickled into a file of the driver's machine named
by the ``taskWriterFile`` option, read where the source is created, and inside the
pickled reader to every read task. The source's schema is then the writer's, and the
sink's query commits what the rows name (one ``foreachBatch`` on the driver). This module
knows no sink: the pipeline layer builds the writer.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Mapping

from mysqlcdc.errors import ConfigError

__all__ = ["OPTION", "pickle_to_file", "read_writer", "writer_option", "note_written",
           "with_written_rows"]

OPTION = "taskWriterFile"


def pickle_to_file(obj, kind: str = "chains") -> str:
    """``obj`` pickled into a file of the driver's machine, named by its content (it may
    hold a secret such as a hash salt: readable by this user only)."""
    data = pickle.dumps(obj)
    folder = Path(tempfile.gettempdir()) / f"mysqlcdc-{kind}-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.pickle"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    return str(path)


def writer_option(writer) -> dict[str, str]:
    """The source option that makes its read tasks write with ``writer``."""
    return {OPTION: pickle_to_file(writer, "writers")}


def read_writer(options: Mapping[str, str]):
    """The task writer a source's ``taskWriterFile`` option names (None without it)."""
    path = {k.lower(): v for k, v in options.items()}.get(OPTION.lower())
    if not path:
        return None
    try:
        return pickle.loads(Path(path).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
        raise ConfigError(f"option {OPTION}: cannot read the sink's task writer in {path}: "
                          f"{err}", hint="Start the pipeline again: the file is written when "
                          "it starts.") from None


# Spark counts a query's input rows from what the source yields: for a task writer, rows
# that name files. The sink notes the changes each batch wrote here (its ``foreachBatch``
# runs in this driver process), and progress reports show those instead.
_WRITTEN: dict[str, dict[int, int]] = {}
_KEEP_BATCHES = 200


def note_written(query_id: str | None, batch_id: int, rows: int) -> None:
    """Record that micro-batch ``batch_id`` of the query ``query_id`` wrote ``rows`` changes."""
    if not query_id:
        return
    batches = _WRITTEN.setdefault(str(query_id), {})
    batches[batch_id] = rows
    for old in [b for b in batches if b <= batch_id - _KEEP_BATCHES]:
        del batches[old]


def with_written_rows(progress: dict) -> dict:
    """A query progress (as a dict) with its input rows and rates counted in changes
    written, for a query whose source's read tasks wrote them; others unchanged."""
    batches = _WRITTEN.get(str(progress.get("id")))
    if not batches:
        return progress
    rows = batches.get(int(progress.get("batchId", -1)))
    if rows is None:
        return progress
    seen = int(progress.get("numInputRows") or 0)
    out = dict(progress, numInputRows=rows)
    for rate in ("inputRowsPerSecond", "processedRowsPerSecond"):
        if progress.get(rate):
            out[rate] = float(progress[rate]) * rows / seen if seen else 0.0
    duration = (progress.get("durationMs") or {}).get("triggerExecution")
    if seen == 0 and rows and duration:
        out["processedRowsPerSecond"] = rows / (duration / 1000)
    return out
