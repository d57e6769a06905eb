"""FlexCDC-style changelog tables: per source table, a table of every row change.

Each source table ``db.t`` gets ``t<suffix>`` (default ``t_changelog``) in the same
target schema/database as a mirror would use, with the source's columns (all nullable)
plus:

- ``dml_type``: +1 for an inserted image, -1 for a deleted one; an update is a -1 row
  of the old image and a +1 row of the new one (a snapshot read ``r`` is +1; a backfill's
  read of a key the table already holds live is 0: the row as it is, no change);
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


def _read_again(r: dict) -> bool:
    """A backfill's read of a row (``mysqlcdc snapshot``, or one mysqlcdc queued after a
    key change, a rename or an ALTER that filled the rows), not the initial snapshot's."""
    return r["op"] == "r" and (r.get("query") or "").startswith("backfill")


def _held(rows: list[dict], suffix: str, live) -> dict[tuple, bool]:
    """(db, table, key text) -> whether the changelog table holds the key live, for every
    key a backfill reads in ``rows``: one ``live`` lookup per table."""
    wanted: dict[tuple[str, str], dict[str, dict]] = {}
    at: dict[tuple[str, str], tuple[str, int]] = {}
    for r in rows:
        if _read_again(r) and r.get("key"):
            key = (r["db"], r["table"])
            wanted.setdefault(key, {})[r["key"]] = r
            at.setdefault(key, (r["file"], r["pos"]))
    held: dict[tuple, bool] = {}
    for (db, table), by_text in wanted.items():
        texts = list(by_text)
        keys = [json.loads(t) for t in texts]
        names = list(keys[0])
        found = live(db, table + suffix, *at[(db, table)], names, keys)
        held.update(((db, table, t), bool(f)) for t, f in zip(texts, found))
    return held


def changelog_rows(rows: Iterable[dict], suffix: str, live=None) -> list[dict]:
    """Envelope rows -> envelope rows of upserts (and schema changes) on changelog tables.

    A row a backfill reads again whose key the changelog table holds live (its last row
    +1, or a change earlier in this batch) is written with ``dml_type`` 0: its image as it
    is now, no change, so ``SUM(dml_type)`` per key stays 1. ``live(db, table, file, pos,
    names, keys)`` asks the target (None: every read is +1, as the initial snapshot's)."""
    rows = sorted(rows, key=lambda r: Decimal(r["seq"]))
    held = _held(rows, suffix, live) if live is not None else {}
    state: dict[tuple, bool] = {}         # keys changed in this batch: live after it?
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
        images = []
        if op in ("u", "d"):
            images.append((-1, r["before"], seq * 2))
        if op in ("c", "u", "r"):
            sign = 1
            if _read_again(r):
                key = (r["db"], r["table"], r["key"])
                if state.get(key, held.get(key, False)):
                    sign = 0
            images.append((sign, r["after"], seq * 2 + (1 if op == "u" else 0)))
        if r.get("key"):
            state[(r["db"], r["table"], r["key"])] = op != "d"
        for sign, image, gsn in images:
            row = {**json.loads(image), **extra, "dml_type": sign, "gsn": str(gsn)}
            out.append({**base, "op": "c", "before": None, "after": json.dumps(row),
                        "key": json.dumps({"gsn": str(gsn)}), "seq": gsn})
    return out
