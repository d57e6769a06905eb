"""Reading mysqlcdc's source offsets back out of a local Spark checkpoint.

Spark writes the planned offsets of batch N to ``<checkpoint>/offsets/N``: a
version line, a metadata line, then one JSON line per source. Ours is the line
with ``file`` and ``pos``. An end offset a read task resolves (``upto``,
``capture.batchend``) stands for the end its task recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

from mysqlcdc.capture.batchend import resolved_offset
from mysqlcdc.types import BinlogPosition

__all__ = ["HISTORY_DIR", "local_dir", "batch_offset", "latest_offset", "offset_data",
           "planned_batches", "committed_batches", "query_id", "remove_stale_writes"]

HISTORY_DIR = "mysqlcdc-schema"     # the schema history's folder inside a sink's checkpoint


def local_dir(checkpoint: str) -> Path | None:
    """The checkpoint as a local path, or None for a remote one (s3a://, hdfs://)."""
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return None
    return Path(checkpoint.removeprefix("file://").removeprefix("file:"))


def offset_data(checkpoint: Path, batch_id: int) -> dict | None:
    """Our source's end offset of ``batch_id`` (``file``, ``pos``, ``gtid``...), a pending
    one (``upto``) resolved from its read tasks' record (its start while that is missing)."""
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
            return resolved_offset(data, checkpoint / HISTORY_DIR)
    return None


def stored_offset(checkpoint: Path, batch_id: int) -> dict | None:
    """Our source's end offset of ``batch_id`` as Spark stored it (a pending one as is)."""
    path = checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and {"file", "pos"} <= data.keys():
            return data
    return None


def batch_offset(checkpoint: Path, batch_id: int) -> BinlogPosition | None:
    """Our source's end offset of ``batch_id``, or None if the file has none."""
    data = offset_data(checkpoint, batch_id)
    return None if data is None else BinlogPosition.of(data["file"], int(data["pos"]))


def planned_batches(checkpoint: Path) -> list[int]:
    """Batch ids with an offset file, newest first."""
    return _numbered(checkpoint / "offsets")


def committed_batches(checkpoint: Path) -> list[int]:
    """Batch ids Spark committed, newest first."""
    return _numbered(checkpoint / "commits")


def _numbered(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted((int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()),
                  reverse=True)


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


def remove_stale_writes(checkpoint: Path) -> list[str]:
    """Remove what a query that died while writing its offset or commit log left there:
    Spark writes ``.N.<uuid>.tmp`` (and its ``..N.<uuid>.tmp.crc``) and renames it to
    ``N``; a full disk or a kill between the two leaves the temporary file, and a new
    query then refuses the folder (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` at batch
    0). Called before the pipeline's queries start, when none writes there; returns the
    names removed."""
    removed = []
    for folder in (checkpoint / "offsets", checkpoint / "commits"):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith(".") and path.name.endswith((".tmp", ".tmp.crc")):
                path.unlink(missing_ok=True)
                removed.append(f"{folder.name}/{path.name}")
    return removed


def query_id(checkpoint: str | None) -> str | None:
    """The id Spark keeps in ``<checkpoint>/metadata`` for the life of the checkpoint."""
    local = local_dir(checkpoint) if checkpoint else None
    if local is None:
        return None
    try:
        return json.loads((local / "metadata").read_text().splitlines()[0]).get("id")
    except (OSError, ValueError, IndexError):
        return None
