"""History tables (slowly changing dimension, type 2): every version of every row.

With ``mode: history`` a target table holds, besides the source's columns:

==================  ==================================================================
``valid_from``      commit time (``ts_ms``) of the change that wrote this version
``valid_to``        commit time of the change that replaced or deleted it (never before
                    ``valid_from``: see ``_end_time``); null while current
``valid_from_seq``  ``seq`` of that change (orders versions exactly, even within a millisecond)
``valid_to_seq``    ``seq`` of the replacing change; null while current
``is_current``      true for the one live version of a key (none after a delete)
==================  ==================================================================

The table's primary key is the source key plus ``valid_from_seq``. A batch's changes of
one key, in ``seq`` order, close the key's current version at the first change and add
one version per insert, update or snapshot read; a delete adds none. A truncate closes
every current version. :func:`scd2` turns one table's changes into those two lists for
any target.

A change can arrive after a newer version of its key: a snapshot chunk's row (state at
the chunk's high watermark) reaches the target before the stream's changes of that key
made since the snapshot began (the initial snapshot holds the stream at its start; a
backfill can read ahead of a lagging stream). Such a late change is already in the
newer version's image: :func:`drop_late` leaves it out, given each key's current
version start, so versions never overlap and a key has at most one current version.
The key's history then goes from its version before the snapshot read straight to the
read's version.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

from mysqlcdc.schema.model import ColumnDef, TableDef

__all__ = ["Change", "Close", "Version", "scd2", "drop_late", "HISTORY_COLUMNS", "history_def",
           "check_names", "version_row", "utc_text", "close_params", "NOT_BEFORE_FROM"]

HISTORY_COLUMNS = ("valid_from", "valid_to", "valid_from_seq", "valid_to_seq", "is_current")


class Change(NamedTuple):
    """One row change as the apply loop keeps it: texts as they came in the envelope
    (a tuple: the loop makes one per row change)."""

    op: str
    after: str | None
    key: str
    seq: Decimal
    ts_ms: int | None


@dataclass(frozen=True, slots=True)
class Close:
    """End the current version of ``key`` (its JSON text) at ``ts_ms`` / ``seq``."""

    key: str
    ts_ms: int | None
    seq: Decimal


@dataclass(frozen=True, slots=True)
class Version:
    after: str
    valid_from: int | None
    valid_from_seq: Decimal
    valid_to: int | None
    valid_to_seq: Decimal | None

    @property
    def is_current(self) -> bool:
        return self.valid_to_seq is None


def scd2(changes: list[Change]) -> tuple[list[Close], list[Version]]:
    """One table's changes (any order) -> the versions to close and the versions to add."""
    by_key: dict[str, list[Change]] = {}
    for ch in sorted(changes, key=lambda c: c.seq):
        by_key.setdefault(ch.key, []).append(ch)
    closes: list[Close] = []
    versions: list[Version] = []
    for key, chain in by_key.items():
        closes.append(Close(key, chain[0].ts_ms, chain[0].seq))
        for this, following in zip(chain, chain[1:] + [None]):
            if this.op == "d" or this.after is None:
                continue
            versions.append(Version(this.after, this.ts_ms, this.seq,
                                    _end_time(this.ts_ms, following.ts_ms) if following
                                    else None,
                                    following.seq if following else None))
    return closes, versions


# ``valid_to`` set by an UPDATE from a parameter given twice: never before ``valid_from``
# (``_end_time``); null when the time is (a comparison with null is not true)
NOT_BEFORE_FROM = "CASE WHEN valid_from > %s THEN valid_from ELSE %s END"


def _end_time(start: int | None, end: int | None) -> int | None:
    """A version's ``valid_to``: the replacing change's commit time, never before the
    version's own ``valid_from``. A binlog commit time has whole seconds (MariaDB), a
    snapshot read's has milliseconds: a change committed in the second a chunk was read,
    after the read, shows a time before it."""
    return end if start is None or end is None else max(start, end)


def drop_late(changes: list[Change], starts: dict[str, Decimal]) -> list[Change]:
    """``changes`` without those older than their key's current version in the target
    (``starts``: key text -> that version's ``valid_from_seq``); see the module doc."""
    if not starts:
        return changes
    return [c for c in changes if c.key not in starts or c.seq > starts[c.key]]


def utc_text(ts_ms: int | None) -> str | None:
    """A commit time as the envelope writes a TIMESTAMP: ``2024-02-29T13:45:07.123Z``."""
    if ts_ms is None:
        return None
    from datetime import datetime, timezone

    t = datetime.fromtimestamp(ts_ms / 1000, timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def version_row(v: Version) -> dict:
    """A version as a row image of its history table (envelope values, as ``after`` has)."""
    import json

    return {**json.loads(v.after), "valid_from": utc_text(v.valid_from),
            "valid_to": utc_text(v.valid_to), "valid_from_seq": str(v.valid_from_seq),
            "valid_to_seq": None if v.valid_to_seq is None else str(v.valid_to_seq),
            "is_current": v.is_current}


def close_params(d: TableDef, closes: list[Close], bind) -> tuple[list[str], list[tuple]]:
    """The source key of history table ``d`` and, per close, the parameters of
    ``UPDATE ... SET valid_to = ?, valid_to_seq = ? WHERE <key> = ? ... AND is_current AND
    valid_from_seq < ?`` (``bind(column, envelope value)`` makes a driver's value)."""
    import json

    cols = {c.name: c for c in d.columns}
    pk = [n for n in d.primary_key if n != "valid_from_seq"]
    params = []
    for c in closes:
        key = json.loads(c.key)
        params.append((bind(cols["valid_to"], utc_text(c.ts_ms)), c.seq,
                       *(bind(cols[n], key[n]) for n in pk), c.seq))
    return pk, params


def check_names(d: TableDef) -> None:
    """A source column named like a history column cannot be kept apart from it."""
    clash = sorted(set(d.column_names) & set(HISTORY_COLUMNS))
    if clash:
        raise ValueError(f"column(s) {', '.join(clash)} collide with the history columns")


def history_def(d: TableDef) -> TableDef:
    """``d`` as its history table: key columns stay NOT NULL, plus the history columns,
    ``valid_from_seq`` joining the primary key."""
    check_names(d)
    seq = dict(data_type="decimal", precision=38, scale=0, column_type="decimal(38,0)")
    # a UTC time: timestamptz in PostgreSQL, timestamp (UTC) in Delta; DATETIME(3) in
    # MySQL, whose TIMESTAMP ends in 2038
    when = dict(data_type="timestamp", fsp=3, column_type="datetime(3)")
    extra = (
        ColumnDef("valid_from", **when),
        ColumnDef("valid_to", **when),
        ColumnDef("valid_from_seq", is_primary_key=True, nullable=False, **seq),
        ColumnDef("valid_to_seq", **seq),
        ColumnDef("is_current", "bool", column_type="tinyint(1)", nullable=False),
    )
    return TableDef(d.db, d.name, d.columns + extra, charset=d.charset)
