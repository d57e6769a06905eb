"""One idempotent Delta Lake commit per micro-batch, shared by every sink that writes Delta.

A Spark micro-batch that was running when the process died is replayed with the same
batch id. Delta's *application transactions* make that replay harmless: each commit
written here carries the action ``txn(appId, version = batch id)`` in the same atomic
log entry as its data files, so after any crash the table's log says exactly which
batch ids it holds. :func:`commit_once` reads that version first and skips a batch
the table already has. Nothing is written outside a commit, so a reader at any
moment sees whole batches or nothing.

Steps: a writer that needs several commits to one table for one batch (the Delta
mirror: the rows before a schema change, the change, the rows after it) gives each
commit a ``step``, a number that grows within the batch (the ``seq`` of the last change
the commit applies). Every such commit carries the same ``txn(appId, batch id)`` and
records its step in the commit metadata (``mysqlcdc.step``); a replay skips a step when
the table's newest commit of that app and batch has reached it. Without a step, any
commit of the batch counts as the whole batch (the changelog's single append).

Used by the changelog's ``format: delta`` (an append per batch) and by the Delta mirror
(``sinks/mirror/delta.py``: merges, schema rewrites and its ledger table).

The single-writer rule holds: one pipeline sink writes one table (its ``app_id``
names both). Maintenance (compaction, retention, vacuum) runs from the same writer
between batches, or from ``mysqlcdc changelog`` while the pipeline is stopped.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path
from typing import Callable, Mapping

from mysqlcdc.errors import ChangelogWriteError

__all__ = ["applied_version", "applied_step", "commit_once", "is_storage_error", "open_table",
           "table_uri"]

log = logging.getLogger(__name__)

APP_KEY = "mysqlcdc.app_id"
BATCH_KEY = "mysqlcdc.batch_id"
STEP_KEY = "mysqlcdc.step"


def table_uri(path: str | Path) -> str:
    """The Delta table location as delta-rs wants it: a local path or a URI."""
    text = str(path)
    if text.startswith("file://"):
        return text.removeprefix("file://")
    if text.startswith("file:"):
        return text.removeprefix("file:")
    return text


def open_table(uri: str, storage_options: Mapping[str, str] | None = None):
    """The Delta table at ``uri``, or None when none exists there yet."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri, storage_options=dict(storage_options or {})):
        return None
    return DeltaTable(uri, storage_options=dict(storage_options or {}))


def applied_version(uri: str, app_id: str,
                    storage_options: Mapping[str, str] | None = None) -> int | None:
    """The newest batch id committed to ``uri`` under ``app_id``, None if none was."""
    table = open_table(uri, storage_options)
    if table is None:
        return None
    return table.transaction_version(app_id)


def applied_step(table, app_id: str, batch_id: int, *, depth: int = 64) -> Decimal | None:
    """The step of the newest commit of ``app_id``'s batch ``batch_id`` in ``table`` (a
    ``DeltaTable``), None when that commit has no step. Maintenance commits of other
    writers between are passed over (up to ``depth`` entries are read)."""
    for entry in table.history(limit=depth):
        if entry.get(APP_KEY) != app_id:
            continue
        if entry.get(BATCH_KEY) != str(batch_id):
            return None
        step = entry.get(STEP_KEY)
        return Decimal(step) if step is not None else None
    return None


def _covered(table, app_id: str, batch_id: int, step) -> bool:
    done = table.transaction_version(app_id) if table is not None else None
    if done is None or done < batch_id:
        return False
    if done > batch_id or step is None:
        return True
    reached = applied_step(table, app_id, batch_id)
    return reached is None or reached >= Decimal(step)


def is_storage_error(err: BaseException) -> bool:
    """Whether a delta-rs failure is the storage's (I/O, permissions, space), which a
    later attempt may get past, rather than the data's."""
    if isinstance(err, OSError):
        return True
    text = str(err)
    return any(s in text for s in ("os error", "LocalFileSystem error", "ObjectStore",
                                   "No space left", "Permission denied"))


def commit_once(uri: str, app_id: str, batch_id: int,
                write: Callable[[object], None], *,
                metadata: Mapping[str, str] | None = None,
                storage_options: Mapping[str, str] | None = None,
                step: Decimal | int | str | None = None, table=None) -> bool:
    """Run ``write(commit_properties)`` unless batch ``batch_id`` (at ``step``) is already
    in the table.

    ``write`` must make exactly one Delta commit and pass the given
    ``CommitProperties`` to it (``write_deltalake(..., commit_properties=p)`` or a
    merge's ``execute``); those carry the application transaction and ``metadata``.
    ``table``: the caller's open ``DeltaTable`` at ``uri`` (saves reading the log again).
    Returns False when the batch (step) was already committed (a replay), True otherwise.
    """
    from deltalake import CommitProperties, Transaction

    if table is None:
        table = open_table(uri, storage_options)
    if _covered(table, app_id, batch_id, step):
        log.info("delta %s: batch %d%s already committed; skipped", uri, batch_id,
                 f" step {step}" if step is not None else "")
        return False
    meta = {APP_KEY: app_id, BATCH_KEY: str(batch_id), **dict(metadata or {})}
    if step is not None:
        meta[STEP_KEY] = str(step)
    props = CommitProperties(custom_metadata=meta,
                             app_transactions=[Transaction(app_id, batch_id)])
    try:
        write(props)
    except Exception as err:   # noqa: BLE001 - sorted by is_storage_error, else re-raised
        if not is_storage_error(err):
            raise
        raise ChangelogWriteError(f"writing batch {batch_id} to the Delta table {uri} "
                                  f"failed: {' '.join(str(err).split())[:300]}") from err
    return True
