"""One idempotent Delta Lake commit per micro-batch, shared by every sink that writes Delta.

A Spark micro-batch that was running when the process died is replayed with the same
batch id. Delta's *application transactions* make that replay harmless: each commit
written here carries the action ``txn(appId, version = batch id)`` in the same atomic
log entry as its data files, so after any crash the table's log says exactly which
batch ids it holds. :func:`commit_once` reads that version first and skips a batch
the table already has. Nothing is written outside a commit, so a reader at any
moment sees whole batches or nothing.

Used by the changelog's ``format: delta`` (an append per batch) and meant for any
other Delta writer (a Delta mirror would pass a merge as ``write``).

The single-writer rule holds: one pipeline sink writes one table (its ``app_id``
names both). Maintenance (compaction, retention, vacuum) runs from the same writer
between batches, or from ``mysqlcdc changelog`` while the pipeline is stopped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Mapping

from mysqlcdc.errors import ChangelogWriteError

__all__ = ["applied_version", "commit_once", "open_table", "table_uri"]

log = logging.getLogger(__name__)


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


def commit_once(uri: str, app_id: str, batch_id: int,
                write: Callable[[object], None], *,
                metadata: Mapping[str, str] | None = None,
                storage_options: Mapping[str, str] | None = None) -> bool:
    """Run ``write(commit_properties)`` unless batch ``batch_id`` is already in the table.

    ``write`` must make exactly one Delta commit and pass the given
    ``CommitProperties`` to it (``write_deltalake(..., commit_properties=p)`` or a
    merge's ``execute``); those carry the application transaction and ``metadata``.
    Returns False when the batch was already committed (a replay), True otherwise.
    """
    from deltalake import CommitProperties, Transaction

    done = applied_version(uri, app_id, storage_options)
    if done is not None and done >= batch_id:
        log.info("delta %s: batch %d already committed (app %s at %d); skipped",
                 uri, batch_id, app_id, done)
        return False
    props = CommitProperties(
        custom_metadata={"mysqlcdc.app_id": app_id, "mysqlcdc.batch_id": str(batch_id),
                         **dict(metadata or {})},
        app_transactions=[Transaction(app_id, batch_id)],
    )
    try:
        write(props)
    except OSError as err:
        raise ChangelogWriteError(f"writing batch {batch_id} to the Delta table {uri} "
                                  f"failed: {err}") from err
    return True
