"""Kafka record encodings of a change envelope: key, value (two formats), headers.

Pure functions over one envelope row as a dict (the columns of
``mysqlcdc.envelope.model``). ``before``, ``after`` and ``key`` are already JSON
text and are embedded as they are, never parsed and re-encoded, so values keep
their exact encoding (BIGINT UNSIGNED, DECIMAL strings) byte for byte.

* key: the envelope's ``key`` (``{"id": 1}``), the same in both formats, as Debezium
  writes it with ``schemas.enable=false``.
* ``mysqlcdc`` value: the envelope as one JSON object, ``seq`` as a decimal string.
* ``debezium`` value: ``{"before", "after", "source", "op", "ts_ms", "transaction"}``
  with Debezium MySQL's ``source`` block (``connector: "mysql"``, ``name``, ``ts_ms``,
  ``snapshot``, ``db``, ``table``, ``server_id``, ``gtid``, ``file``, ``pos``, ``row``,
  ``thread``, ``query``) plus ``seq``; top-level ``ts_ms`` is when the sink wrote it.
* headers: ``seq``, ``file``, ``pos``, ``row``, ``gtid`` (when known) as UTF-8 text; the two
  halves of a key change add ``__debezium.newkey`` (on the delete) or
  ``__debezium.oldkey`` (on the create) with the other half's key.

``seq`` is text everywhere (38 digits do not fit a JSON double); compare it as an integer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from mysqlcdc.envelope.model import envelope_json

__all__ = ["encode_key", "mysqlcdc_value", "debezium_value", "headers", "TxnTally",
           "tally_transactions", "merge_tallies", "boundary_records", "VERSION"]

Row = Mapping[str, Any]

try:
    from importlib.metadata import version as _version

    VERSION = _version("mysqlcdc")
except Exception:  # pragma: no cover - running from a source tree without metadata
    VERSION = "0"

_dumps = json.dumps


def _j(value: Any) -> str:
    """JSON for a scalar (None -> null)."""
    return "null" if value is None else _dumps(value)


def _raw(text: str | None) -> str:
    """Already-JSON text, embedded as is."""
    return "null" if text is None else text


def encode_key(row: Row) -> bytes | None:
    key = row["key"]
    return None if key is None else key.encode()


def mysqlcdc_value(row: Row) -> bytes:
    """The envelope as JSON, fields in envelope order (``envelope.model.envelope_json``)."""
    return envelope_json(row).encode()


def debezium_value(row: Row, name: str, now_ms: int) -> bytes:
    """Debezium's MySQL change-event value (JSON converter, schemas disabled)."""
    source = (
        f'{{"version":{_j(VERSION)},"connector":"mysql","name":{_j(name)},'
        f'"ts_ms":{_j(row["ts_ms"])},"snapshot":"{"true" if row["op"] == "r" else "false"}",'
        f'"db":{_j(row["db"])},'
        f'"sequence":null,"table":{_j(row["table"])},"server_id":{_j(row["server_id"])},'
        f'"gtid":{_j(row["gtid"])},"file":{_j(row["file"])},"pos":{_j(row["pos"])},'
        f'"row":{_j(row["row"])},"thread":null,"query":{_j(row.get("query"))},"seq":"{row["seq"]}"}}'
    )
    return (
        f'{{"before":{_raw(row["before"])},"after":{_raw(row["after"])},"source":{source},'
        f'"op":{_j(row["op"])},"ts_ms":{now_ms},"transaction":null}}'
    ).encode()


def headers(row: Row) -> list[tuple[str, bytes]]:
    out = [("seq", str(row["seq"]).encode()), ("file", str(row["file"]).encode()),
           ("pos", str(row["pos"]).encode()), ("row", str(row["row"]).encode())]
    if row["gtid"] is not None:
        out.append(("gtid", row["gtid"].encode()))
    moved = row.get("moved_key")
    if moved is not None:
        # a key change's halves name each other's key, as Debezium's headers do: the
        # delete of the old key carries the new one, the create carries the old one
        name = "__debezium.newkey" if row["op"] == "d" else "__debezium.oldkey"
        out.append((name, moved.encode()))
    return out


# --- transaction boundaries -------------------------------------------------


@dataclass
class TxnTally:
    """What one write task saw of one transaction: first seq, time and rows per table."""

    first_seq: int
    ts_ms: int | None
    tables: dict[str, int] = field(default_factory=dict)


def tally_transactions(rows: list[Row]) -> dict[str, TxnTally]:
    """Per ``txn_id``: the rows per ``db.table`` among ``rows``."""
    out: dict[str, TxnTally] = {}
    for row in rows:
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


def boundary_records(txns: dict[str, TxnTally]) -> list[tuple[bytes, bytes]]:
    """Debezium-style BEGIN and END (key, value) pairs, transactions in binlog order."""
    out = []
    for txn_id, t in sorted(txns.items(), key=lambda item: item[1].first_seq):
        key = _dumps({"id": txn_id}).encode()
        begin = {"status": "BEGIN", "id": txn_id, "ts_ms": t.ts_ms, "event_count": None,
                 "data_collections": None}
        end = {"status": "END", "id": txn_id, "ts_ms": t.ts_ms,
               "event_count": sum(t.tables.values()),
               "data_collections": [{"data_collection": n, "event_count": c}
                                    for n, c in sorted(t.tables.items())]}
        out += [(key, _dumps(begin).encode()), (key, _dumps(end).encode())]
    return out
