"""The Plugin protocol (FlexCDC's callbacks) and what a plugin is given.

A plugin is a class; the ``plugins`` sink creates one instance of each listed class
per run and calls, for every micro-batch, in exact binlog order::

    init(ctx)                                   once, before the first batch
    begin_trx(trx_id, gsn_hwm)                  a transaction starts
    insert(row, db, table, trx_id, gsn)         an inserted row (and a snapshot row)
    delete(row, db, table, trx_id, gsn)         a deleted row (its old image)
    update_before(row, db, table, trx_id, gsn)  an updated row's old image ...
    update_after(row, db, table, trx_id, gsn)   ... then its new image (gsn + 1)
    commit_trx(trx_id, last_gsn)                the transaction committed
    rollback_trx(trx_id)                        instead of commit_trx: the server logged the
                                                rows, then ROLLBACK (tables that cannot roll
                                                back, such as MyISAM, keep those changes)
    deinit()                                    once, when the sink's query stops

A method a plugin does not define is not called. Several plugins are called in the
listed order, each callback for one plugin after the other.

* ``trx_id`` numbers the transactions that reach the sink: 1, 2, 3 ... over the whole
  life of the pipeline (kept in the sink's checkpoint folder).
* ``gsn``, the global sequence number, numbers row images: every callback gets the next
  one (an update's two images get two).
* ``gsn_hwm`` ("high water mark") given to ``begin_trx`` is the last gsn of the previous
  transaction (0 before the first): every gsn of the new transaction is above it.
* ``row`` is a dict of typed values (the table in :mod:`mysqlcdc.envelope.values`).

Schema changes and truncates (``op`` s and t) do not reach plugins.

Delivery is at least once per micro-batch: the callbacks of a batch run on the driver
after the batch is read and before Spark commits it; if a callback raises (the pipeline
stops with PLUGIN_FAILED) or the process dies, the next run calls the whole batch
again, with the same ``ctx.batch_id``, trx ids and gsns. A plugin that must not apply a
batch twice remembers the last ``ctx.batch_id`` it finished (for example in the same
transaction as its own writes) and skips a batch it has seen.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Plugin", "PluginContext", "CALLBACKS"]

CALLBACKS = ("init", "begin_trx", "commit_trx", "rollback_trx", "insert", "delete",
             "update_before", "update_after", "deinit")


class Plugin(Protocol):
    """What a plugin class may implement (every method is optional)."""

    def init(self, ctx: "PluginContext") -> None: ...
    def begin_trx(self, trx_id: int, gsn_hwm: int) -> None: ...
    def commit_trx(self, trx_id: int, last_gsn: int) -> None: ...
    def rollback_trx(self, trx_id: int) -> None: ...
    def insert(self, row: dict, db: str, table: str, trx_id: int, gsn: int) -> None: ...
    def delete(self, row: dict, db: str, table: str, trx_id: int, gsn: int) -> None: ...
    def update_before(self, row: dict, db: str, table: str, trx_id: int, gsn: int) -> None: ...
    def update_after(self, row: dict, db: str, table: str, trx_id: int, gsn: int) -> None: ...
    def deinit(self) -> None: ...


@dataclass
class PluginContext:
    """Given to ``init``, and kept by the plugin: ``batch_id`` follows the current batch.

    ``config`` is the pipeline's config (secrets stay masked), ``options`` the sink's
    ``options`` mapping, ``helpers`` the helper functions (built-ins plus the config's
    ``helpers`` modules), ``logger`` a logger named after the pipeline, ``event`` the
    envelope record of the row being called (its ``seq``, ``file``, ``pos``, ``gtid`` ...).
    """

    config: Any
    options: dict[str, Any]
    helpers: Any
    logger: logging.Logger
    pipeline: str = ""
    batch_id: int = -1
    event: dict[str, Any] = field(default_factory=dict)
