"""Each event's place in its transaction, computed before the sink spreads rows by key.

Debezium's ``transaction`` block gives every event ``total_order`` (its position
among the events of its transaction, from 1) and ``data_collection_order`` (its
position among the transaction's events of the same table). The sink's write tasks
cannot count them: rows are spread over tasks by key, so a transaction's rows end
up in several tasks. Before that shuffle, though, every read partition of the
source holds whole transactions (ranges are cut at transaction boundaries, DESIGN
decision 4), so a narrow ``mapInArrow`` step numbers them there, in ``seq`` order.
It counts exactly the rows the sink counts in the END records: everything but
``s`` (schema changes go to their own topic) and ``r`` (snapshot reads belong to no
transaction, as in Debezium).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.sinks.kafka.debezium import TXN_ORDER, TXN_TABLE_ORDER

__all__ = ["orders", "counted", "number_partition", "with_transaction_orders", "Numbering"]

UNCOUNTED = ("s", "r")


def counted(op: str, txn_id: str | None) -> bool:
    return txn_id is not None and op not in UNCOUNTED


def orders(ops: Sequence[str], txn_ids: Sequence[str | None], dbs: Sequence[str],
           tables: Sequence[str]) -> tuple[list[int | None], list[int | None]]:
    """Total and per-table orders of rows given in seq order (None where not counted)."""
    return Numbering().number(ops, txn_ids, dbs, tables)


class Numbering:
    """The two orders of a read task's rows numbered as they come (a range task's rows
    arrive in ``seq`` order and hold whole transactions): for a sink that publishes in
    the read tasks, where no ``mapInArrow`` step runs before it. Only the current
    transaction's counts are kept."""

    def __init__(self) -> None:
        self._total: dict[str, int] = {}
        self._per_table: dict[tuple[str, str, str], int] = {}

    def number(self, ops: Sequence[str], txn_ids: Sequence[str | None], dbs: Sequence[str],
               tables: Sequence[str]) -> tuple[list[int | None], list[int | None]]:
        """The orders of the next rows (in seq order), counting on from earlier calls."""
        out_total: list[int | None] = []
        out_table: list[int | None] = []
        for op, txn, db, table in zip(ops, txn_ids, dbs, tables):
            if not counted(op, txn):
                out_total.append(None)
                out_table.append(None)
                continue
            if txn not in self._total:      # rows in seq order: a transaction's are together
                self._total.clear()
                self._per_table.clear()
            self._total[txn] = n = self._total.get(txn, 0) + 1
            self._per_table[(txn, db, table)] = m = self._per_table.get((txn, db, table), 0) + 1
            out_total.append(n)
            out_table.append(m)
        return out_total, out_table

    def add(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its rows' two orders appended."""
        total, per_table = self.number(*(batch.column(c).to_pylist()
                                         for c in ("op", "txn_id", "db", "table")))
        batch = batch.append_column(TXN_ORDER, pa.array(total, pa.int64()))
        return batch.append_column(TXN_TABLE_ORDER, pa.array(per_table, pa.int64()))


def number_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: one read partition's rows with their two orders."""
    found = [b for b in batches if b.num_rows]
    if not found:
        return
    table = pa.Table.from_batches(found)
    table = table.take(pc.sort_indices(table, [("seq", "ascending")]))
    total, per_table = orders(*(table[c].to_pylist() for c in ("op", "txn_id", "db", "table")))
    table = table.append_column(TXN_ORDER, pa.array(total, pa.int64()))
    table = table.append_column(TXN_TABLE_ORDER, pa.array(per_table, pa.int64()))
    yield from table.to_batches()



def with_transaction_orders(df):
    """``df`` (envelope rows, partitioned as the source reads them) plus the two orders."""
    from pyspark.sql.types import LongType, StructField, StructType

    out = StructType(list(df.schema.fields) + [StructField(TXN_ORDER, LongType()),
                                                StructField(TXN_TABLE_ORDER, LongType())])
    return df.mapInArrow(number_partition, out)
