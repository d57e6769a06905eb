"""Reading mysqlcdc's source offsets back out of a local Spark checkpoint.

Spark writes the planned offsets of batch N to ``<checkpoint>/offsets/N``: a
version line, a metadata line, then one JSON line per source. Ours is the line
with ``file`` and ``pos``. An end offset a read task resolves (``upto``,
``capture.batchend``) stands for the end its task recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

from mysqlcdc.capture.batchend import resolved_end
from mysqlcdc.types import BinlogPosition

__all__ = ["HISTORY_DIR", "local_dir", "batch_offset", "latest_offset"]

HISTORY_DIR = "mysqlcdc-schema"     # the schema history's folder inside a sink's checkpoint


def local_dir(checkpoint: str) -> Path | None:
    """The checkpoint as a local path, or None for a remote one (s3a://, hdfs://)."""
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return None
    return Path(checkpoint.removeprefix("file://").removeprefix("file:"))


def batch_offset(checkpoint: Path, batch_id: int) -> BinlogPosition | None:
    """Our source's end offset of ``batch_id``, or None if the file has none."""
    path = checkpoint / "offsets" / str(batch_id)
    if not path.is_file():
        return None
    for line in reversed(path.read_text().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and {"file", "pos"} <= data.keys():
            # an end its read task resolved: its record lies in the schema history
            return resolved_end(data, checkpoint / HISTORY_DIR)
    return None


def latest_offset(checkpoint: Path) -> BinlogPosition | None:
    """The end offset of the newest planned batch, if any."""
    offsets = checkpoint / "offsets"
    if not offsets.is_dir():
        return None
    for batch in sorted((int(p.name) for p in offsets.glob("[0-9]*")), reverse=True):
        found = batch_offset(checkpoint, batch)
        if found is not None:
            return found
    return None
