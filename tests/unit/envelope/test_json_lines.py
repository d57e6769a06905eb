"""``envelope_json_lines`` (Arrow, by column) writes exactly what ``envelope_json`` (orjson,
row by row) writes, whatever the batch's columns hold: one value throughout, a few values
with nulls between, values that need escaping, a transaction id equal to the GTID or not."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from mysqlcdc.envelope.model import ARROW_SCHEMA, envelope_json, envelope_json_lines

BASE = {
    "op": "u", "db": "shop", "table": "orders", "before": '{"id":1,"v":"a"}',
    "after": '{"id":1,"v":"b"}', "key": '{"id":1}', "ts_ms": 1709214307123, "server_id": 7,
    "gtid": "0-7-42", "txn_id": "0-7-42", "file": "mariadb-bin.000003", "pos": 1234,
    "row": 0, "seq": Decimal("3000000000546000000000000"), "query": None, "moved_key": None,
}


def _rows(n: int, **columns) -> list[dict]:
    """``n`` rows of BASE with ``columns[name]`` a function of the row number."""
    return [{**BASE, **{name: f(i) for name, f in columns.items()}} for i in range(n)]


CASES = {
    "every text column one value": _rows(5),
    "one value that needs escaping": _rows(3, db=lambda i: 'we"ird\\db', table=lambda i: "t\n"),
    "few values, nulls between": _rows(
        9, op=lambda i: "cud"[i % 3], file=lambda i: None if i % 4 == 0 else f"bin.{i % 2}",
        db=lambda i: None if i == 2 else "shop", table=lambda i: ["a", 'b"', "ä"][i % 3]),
    "one value beside nulls": _rows(4, db=lambda i: None if i % 2 else "x",
                                    file=lambda i: None if i else "f"),
    "only nulls": _rows(3, db=lambda i: None, table=lambda i: None, file=lambda i: None,
                        gtid=lambda i: None, txn_id=lambda i: None, query=lambda i: None),
    "transaction id not the GTID": _rows(4, gtid=lambda i: f"0-7-{i}",
                                         txn_id=lambda i: f"f:{i}" if i % 2 else f"0-7-{i}"),
    "GTID null where the id is set": _rows(3, gtid=lambda i: None if i == 1 else "0-7-9",
                                           txn_id=lambda i: "0-7-9"),
    "query text with a control character": _rows(3, query=lambda i: 'x\x01"y' if i else None),
    "no rows": [],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("newline", [True, False])
def test_json_lines_are_the_row_encoders_bytes(case, newline):
    rows = CASES[case]
    batch = pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)
    lines = envelope_json_lines(batch, newline=newline)
    assert len(lines) == len(rows)
    end = b"\n" if newline else b""
    assert [line.as_py().encode() for line in lines] == [envelope_json(r) + end for r in rows]
