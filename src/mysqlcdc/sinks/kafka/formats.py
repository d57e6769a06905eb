"""Kafka record encodings of a change envelope in the ``mysqlcdc`` format, headers,
and the transaction boundary records. (Debezium's format is :mod:`.debezium`.)

Pure functions over one envelope row as a dict (the columns of
``mysqlcdc.envelope.model``). ``before``, ``after`` and ``key`` are already JSON
text and are embedded as they are, never parsed and re-encoded, so values keep
their exact encoding (BIGINT UNSIGNED, DECIMAL strings) byte for byte.

* key: the envelope's ``key`` (``{"id": 1}``).
* value: the envelope as one JSON object, ``seq`` as a decimal string.
* headers: with the sink's ``position_headers``, ``seq``, ``file``, ``pos``, ``row``,
  ``gtid`` (when known) as UTF-8 text; always, the two halves of a key change carry
  ``__debezium.newkey`` (on the delete) or ``__debezium.oldkey`` (on the create) with the
  other half's key.

``seq`` is text everywhere (38 digits do not fit a JSON double); compare it as an integer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from mysqlcdc.envelope.model import envelope_json
from mysqlcdc.sinks.kafka.txnorder import counted

__all__ = ["encode_key", "mysqlcdc_value", "headers", "key_change_header", "TxnTally",
           "tally_transactions", "merge_tallies", "boundary_records"]

Row = Mapping[str, Any]

_dumps = json.dumps


def encode_key(row: Row) -> bytes | None:
    key = row["key"]
    return None if key is None else key.encode()


def mysqlcdc_value(row: Row) -> bytes:
    """The envelope as JSON, fields in envelope order (``envelope.model.envelope_json``:
    one ``orjson`` call, the text ``mysqlcdc decode --changes`` prints)."""
    return envelope_json(row)


def headers(row: Row, moved: bytes | None = None,
            position: bool = True) -> list[tuple[str, bytes]] | None:
    """A message's headers, None when it has none. ``moved``: the other half's key as the
    format writes keys (default: the envelope's); ``position``: with the position headers
    (the sink's ``position_headers``)."""
    out = []
    if position:
        out += [("seq", str(row["seq"]).encode()), ("file", str(row["file"]).encode()),
                ("pos", str(row["pos"]).encode()), ("row", str(row["row"]).encode())]
        if row["gtid"] is not None:
            out.append(("gtid", row["gtid"].encode()))
    if row.get("moved_key") is not None:
        out.append((key_change_header(row["op"]),
                    row["moved_key"].encode() if moved is None else moved))
    return out or None


def key_change_header(op: str) -> str:
    """The header naming the other half of a key change: as Debezium's, the delete of the
    old key carries the new one, the create carries the old one."""
    return "__debezium.newkey" if op == "d" else "__debezium.oldkey"


# --- transaction boundaries -------------------------------------------------


@dataclass
class TxnTally:
    """What one write task saw of one transaction: first seq, time and rows per table."""

    first_seq: int
    ts_ms: int | None
    tables: dict[str, int] = field(default_factory=dict)


def tally_transactions(rows: list[Row]) -> dict[str, TxnTally]:
    """Per ``txn_id``: the rows per ``db.table`` among ``rows``, counting what
    ``txnorder.counted`` counts (no schema changes, no snapshot reads)."""
    out: dict[str, TxnTally] = {}
    for row in rows:
        if not counted(row["op"], row["txn_id"]):
            continue
        seq = int(row["seq"])
        tally = out.get(row["txn_id"])
        if tally is None:
            tally = out[row["txn_id"]] = TxnTally(seq, row["ts_ms"])
        tally.first_seq = min(tally.first_seq, seq)
        name = f'{row["db"]}.{row["table"]}'
        tally.tables[name] = tally.tables.get(name, 0) + 1
    return out


def merge_tallies(parts: list[dict[str, TxnTally]]) -> dict[str, TxnTally]:
    """One tally per transaction from the tallies of every write task of a batch."""
    out: dict[str, TxnTally] = {}
    for part in parts:
        for txn_id, t in part.items():
            mine = out.setdefault(txn_id, TxnTally(t.first_seq, t.ts_ms))
            mine.first_seq = min(mine.first_seq, t.first_seq)
            for name, n in t.tables.items():
                mine.tables[name] = mine.tables.get(name, 0) + n
    return out


def boundary_records(txns: dict[str, TxnTally],
                     wrap: Callable[[str, dict], bytes] | None = None) -> list[tuple[bytes, bytes]]:
    """Debezium-style BEGIN and END (key, value) pairs, transactions in binlog order.

    ``wrap(part, payload)`` encodes them (``part`` is ``"key"`` or ``"value"``);
    default: the payload as JSON."""
    wrap = wrap or (lambda _part, payload: _dumps(payload).encode())
    out = []
    for txn_id, t in sorted(txns.items(), key=lambda item: item[1].first_seq):
        key = wrap("key", {"id": txn_id})
        begin = {"status": "BEGIN", "id": txn_id, "ts_ms": t.ts_ms, "event_count": None,
                 "data_collections": None}
        end = {"status": "END", "id": txn_id, "ts_ms": t.ts_ms,
               "event_count": sum(t.tables.values()),
               "data_collections": [{"data_collection": n, "event_count": c}
                                    for n, c in sorted(t.tables.items())]}
        out += [(key, wrap("value", begin)), (key, wrap("value", end))]
    return out
