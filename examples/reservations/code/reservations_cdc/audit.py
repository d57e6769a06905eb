"""An audit plugin: every transaction and row image as one JSON line in a file.

    sinks:
      - plugins:
          plugins: ["reservations_cdc.audit:AuditPlugin"]
          options: {audit_file: ./audit.jsonl}

Lines carry the batch id, the transaction id and the gsn: the plugins sink calls a
micro-batch again after a failure (at least once per batch), with the same ids, so a
reader that keeps the first line per (callback, gsn) or (callback, trx_id) sees every
change exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path


class AuditPlugin:
    def init(self, ctx):
        self.ctx = ctx
        self.path = Path(ctx.options.get("audit_file", "audit.jsonl"))
        self.out = self.path.open("a", encoding="utf-8")
        self._write("init", pipeline=ctx.pipeline)

    def begin_trx(self, trx_id, gsn_hwm):
        self._write("begin_trx", trx_id=trx_id, gsn_hwm=gsn_hwm)

    def commit_trx(self, trx_id, last_gsn):
        self._write("commit_trx", trx_id=trx_id, last_gsn=last_gsn)
        self.out.flush()

    def rollback_trx(self, trx_id):
        self._write("rollback_trx", trx_id=trx_id)
        self.out.flush()

    def insert(self, row, db, table, trx_id, gsn):
        self._row("insert", row, db, table, trx_id, gsn)

    def delete(self, row, db, table, trx_id, gsn):
        self._row("delete", row, db, table, trx_id, gsn)

    def update_before(self, row, db, table, trx_id, gsn):
        self._row("update_before", row, db, table, trx_id, gsn)

    def update_after(self, row, db, table, trx_id, gsn):
        self._row("update_after", row, db, table, trx_id, gsn)

    def deinit(self):
        self._write("deinit")
        self.out.close()

    def _row(self, name, row, db, table, trx_id, gsn):
        self._write(name, table=f"{db}.{table}", trx_id=trx_id, gsn=gsn,
                    seq=str(self.ctx.event.get("seq")), row=row)

    def _write(self, callback, **fields):
        line = {"callback": callback, "batch_id": self.ctx.batch_id, **fields}
        self.out.write(json.dumps(line, default=str) + "\n")
