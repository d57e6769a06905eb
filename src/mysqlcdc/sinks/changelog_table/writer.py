"""FlexCDC-style changelog tables: per source table, a table of every row change.

Each source table ``db.t`` gets ``t<suffix>`` (default ``t_changelog``) in the same
target schema/database as a mirror would use, with the source's columns (all nullable)
plus:

- ``dml_type``: +1 for an inserted image, -1 for a deleted one; an update is a -1 row
  of the old image and a +1 row of the new one; a snapshot read ``r`` is +1; 0 where
  the log already counts the key's state (a read of a key it holds live, a change older
  than the key's last counted row, the old image of a key it never held:
  :func:`changelog_rows`);
- ``uow_id``: the unit of work (transaction): the smallest ``seq`` of its changes, so
  monotonically increasing in commit order and unique;
- ``gsn``: a global sequence number, unique and increasing across all tables:
  ``2 * seq`` (``2 * seq + 1`` for the +1 row of an update); the table's primary key;
- ``server_id`` and ``binlog_position`` (``file:pos`` of the rows event).

The changes are turned into upserts on these tables and applied by the mirror's apply
loop (:func:`mysqlcdc.sinks.mirror.writer.apply_batch`), so they share its ledger
(``mysqlcdc_offsets`` row ``<pipeline>#changelog@<query id>``), one transaction per batch and its
retries. Schema changes add, drop, rename and retype columns of the changelog table (it
is created from the schema history at the change's position, so signedness and names are
right even when the pipeline lags behind DDL); a dropped or truncated source table keeps
its changelog; a renamed one continues in a changelog table of its new name.
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from typing import Iterable

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror.writer import Definitions

__all__ = ["changelog_rows", "ChangelogDefinitions", "changelog_def", "EXTRA_COLUMNS"]

EXTRA_COLUMNS = (
    ColumnDef("dml_type", "tinyint", column_type="tinyint(4)", nullable=False),
    ColumnDef("uow_id", "decimal", precision=38, scale=0, column_type="decimal(38,0)"),
    ColumnDef("gsn", "decimal", precision=38, scale=0, column_type="decimal(38,0)",
              is_primary_key=True, nullable=False),
    ColumnDef("server_id", "bigint", unsigned=True, column_type="bigint(20) unsigned"),
    ColumnDef("binlog_position", "varchar", length=600, charset="utf8mb4",
              column_type="varchar(600)"),
)


def changelog_def(d: TableDef, suffix: str) -> TableDef:
    cols = tuple(replace(c, is_primary_key=False, nullable=True) for c in d.columns)
    return TableDef(d.db, d.name + suffix, cols + EXTRA_COLUMNS, charset=d.charset)


class ChangelogDefinitions(Definitions):
    """Definitions of the changelog tables: the source table's, plus the extra columns."""

    def __init__(self, history_dir: str | None, suffix: str) -> None:
        super().__init__(history_dir)
        self.suffix = suffix

    def at(self, db: str, table: str, file: str, pos: int) -> TableDef | None:
        source = table[: -len(self.suffix)] if table.endswith(self.suffix) else table
        found = super().at(db, source, file, pos)
        return None if found is None else changelog_def(found, self.suffix)


def _dump(d: TableDef | None, suffix: str) -> str | None:
    return None if d is None else json.dumps(changelog_def(d, suffix).to_json())


def _logged(rows: list[dict], suffix: str, last_rows) -> dict[tuple, tuple[bool, Decimal | None]]:
    """(db, table, key text) -> (live, gsn of its last counted row: +1 or -1) in the
    changelog table, for every key a row change of ``rows`` names: one ``last_rows``
    lookup per table."""
    wanted: dict[tuple[str, str], dict[str, dict]] = {}
    at: dict[tuple[str, str], tuple[str, int]] = {}
    for r in rows:
        if r["op"] in ("c", "u", "d", "r") and r.get("key"):
            key = (r["db"], r["table"])
            wanted.setdefault(key, {})[r["key"]] = r
            at.setdefault(key, (r["file"], r["pos"]))
    logged: dict[tuple, tuple[bool, Decimal | None]] = {}
    for (db, table), by_text in wanted.items():
        texts = list(by_text)
        keys = [json.loads(t) for t in texts]
        names = list(keys[0])
        found = last_rows(db, table + suffix, *at[(db, table)], names, keys)
        logged.update(((db, table, t), (False, None) if f is None else (f[0] != -1, f[1]))
                      for t, f in zip(texts, found))
    return logged


def changelog_rows(rows: Iterable[dict], suffix: str, last_rows=None) -> list[dict]:
    """Envelope rows -> envelope rows of upserts (and schema changes) on changelog tables.

    ``dml_type`` follows what the log already holds of each key, so that ``SUM(dml_type)``
    per key is 1 for a live key and 0 for a deleted one, and ``SUM(x * dml_type)`` counts
    every live image once, whatever order a snapshot and the stream arrive in:

    * a change older than the key's last counted row (+1 or -1; a stream change before
      the high watermark of the snapshot chunk that read the key, which the log got
      first) is already in that row's image: its rows are 0;
    * a read (``r``) of a key the log holds live is 0: the row as it is, no change;
    * the old image of an update or delete of a key the log does not hold live is 0: an
      image the log never counted (the key changed while its chunk was read, or before
      the pipeline's start without a snapshot).

    ``last_rows(db, table, file, pos, names, keys)`` asks the target for each key's last
    counted ``(dml_type, gsn)`` (None: none); without it every image counts, but a read of
    a key an earlier change of the batch left live."""
    rows = sorted(rows, key=lambda r: Decimal(r["seq"]))
    state = _logged(rows, suffix, last_rows) if last_rows is not None else {}
    uow: dict[str, Decimal] = {}
    for r in rows:
        if r["op"] in ("c", "u", "d", "r"):
            txn = r.get("txn_id") or f"{r['file']}:{r['pos']}"
            uow.setdefault(txn, Decimal(r["seq"]))
    out: list[dict] = []
    for r in rows:
        op = r["op"]
        base = {"db": r["db"], "table": r["table"] + suffix, "file": r["file"], "pos": r["pos"]}
        seq = Decimal(r["seq"])
        if op == "s":
            before = TableDef.from_json(json.loads(r["before"])) if r["before"] else None
            after = TableDef.from_json(json.loads(r["after"])) if r["after"] else None
            if after is None:
                continue                       # a dropped (or renamed-away) table keeps its log
            if before is not None and (before.db, before.name) != (after.db, after.name):
                before = None                  # renamed: the new name starts its own log
            out.append({**base, "op": "s", "before": _dump(before, suffix),
                        "after": _dump(after, suffix), "key": None, "seq": seq * 2})
            continue
        if op not in ("c", "u", "d", "r"):
            continue                           # truncate: the log keeps what happened
        txn = r.get("txn_id") or f"{r['file']}:{r['pos']}"
        extra = {"uow_id": str(uow[txn]), "server_id": r.get("server_id"),
                 "binlog_position": f"{r['file']}:{r['pos']}"}
        key = (r["db"], r["table"], r["key"]) if r.get("key") else None
        live, last = state.get(key, (None, None))          # live None: not known
        older = last is not None and last > seq * 2
        images = []
        if op in ("u", "d"):
            images.append((0 if older or live is False else -1, r["before"], seq * 2))
        if op in ("c", "u", "r"):
            images.append((0 if older or (op == "r" and live) else 1, r["after"],
                           seq * 2 + (1 if op == "u" else 0)))
        counted = [(sign, gsn) for sign, _, gsn in images if sign]
        if key is not None and counted:
            state[key] = (counted[-1][0] == 1, counted[-1][1])
        for sign, image, gsn in images:
            row = {**json.loads(image), **extra, "dml_type": sign, "gsn": str(gsn)}
            out.append({**base, "op": "c", "before": None, "after": json.dumps(row),
                        "key": json.dumps({"gsn": str(gsn)}), "seq": gsn})
    return out
