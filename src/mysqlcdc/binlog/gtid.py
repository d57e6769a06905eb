"""GTID event bodies: MySQL GTID/ANONYMOUS_GTID/GTID_TAGGED and PREVIOUS_GTIDS,
MariaDB GTID and GTID_LIST. Pure functions of the body bytes."""

from __future__ import annotations

from dataclasses import dataclass

from .reader import Reader, ShortRead

__all__ = ["MysqlGtid", "read_mysql_gtid", "read_tagged_gtid", "read_previous_gtids",
           "read_mariadb_gtid", "read_mariadb_gtid_list", "format_uuid"]

LOGICAL_TIMESTAMP_TYPECODE = 2
_TAGGED_FIELDS = ("flags", "sid", "gno", "tag", "last_committed", "sequence_number",
                  "immediate_commit_ts", "original_commit_ts", "transaction_length",
                  "immediate_server_version", "original_server_version", "commit_group_ticket")


def format_uuid(b: bytes) -> str:
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(slots=True)
class MysqlGtid:
    sid: bytes
    gno: int
    tag: str | None = None
    commit_ts_us: int | None = None
    transaction_length: int | None = None

    def text(self, anonymous: bool) -> str | None:
        if anonymous:
            return None
        mid = f":{self.tag}" if self.tag else ""
        return f"{format_uuid(self.sid)}{mid}:{self.gno}"


def read_mysql_gtid(r: Reader) -> MysqlGtid:
    """GTID_LOG_EVENT / ANONYMOUS_GTID_LOG_EVENT (5.6: 25 bytes; 5.7: 42; 8.0: more)."""
    r.u8()  # flags
    sid, gno = r.take(16), r.s64()
    g = MysqlGtid(sid, gno)
    if r.remaining() and r.buf[r.pos] == LOGICAL_TIMESTAMP_TYPECODE:
        r.u8()
        r.s64(), r.s64()  # last_committed, sequence_number
        if r.remaining() >= 7:
            ts = r.uint(7)
            if ts & (1 << 55):
                ts &= ~(1 << 55)
                r.uint(7)  # original_commit_timestamp
            g.commit_ts_us = ts
        if r.remaining():
            g.transaction_length = r.packed()
    return g


def read_tagged_gtid(r: Reader) -> MysqlGtid:
    """GTID_TAGGED_LOG_EVENT: one message of the serialization library."""
    r.u8()  # serialization format version
    start = r.pos - 1
    size = r.varlen_uint()
    r.varlen_uint()  # last non-ignorable field id
    end = start + size
    if end > r.end or end < r.pos:
        raise ShortRead("tagged GTID message size out of range")
    g = MysqlGtid(b"\x00" * 16, 0)
    while r.pos < end:
        fid = r.varlen_uint()
        name = _TAGGED_FIELDS[fid] if fid < len(_TAGGED_FIELDS) else None
        if name is None:
            break  # newer field: its size is unknown, and all known fields came first
        if name == "sid":
            g.sid = bytes(r.varlen_uint() & 0xFF for _ in range(16))
        elif name == "tag":
            g.tag = r.take(r.varlen_uint()).decode("utf-8", "backslashreplace")
        elif name in ("gno", "last_committed", "sequence_number"):
            value = r.varlen_int()
            if name == "gno":
                g.gno = value
        else:
            value = r.varlen_uint()
            if name == "immediate_commit_ts":
                g.commit_ts_us = value
            elif name == "transaction_length":
                g.transaction_length = value
    return g


def _intervals(r: Reader) -> str:
    n = r.u64()
    if n > r.remaining() // 16:
        raise ShortRead("GTID interval count out of range")
    parts = []
    for _ in range(n):
        start, stop = r.s64(), r.s64()
        parts.append(str(start) if stop == start + 1 else f"{start}-{stop - 1}")
    return ":".join(parts)


def read_previous_gtids(r: Reader) -> str:
    """PREVIOUS_GTIDS: ``uuid:1-5:7,uuid2:tag:1-2`` in MySQL's text form."""
    head = r.u64()
    tagged = head >> 56 == 1
    n_sids = (head >> 8) & ((1 << 48) - 1) if tagged else head & ((1 << 56) - 1)
    if n_sids > r.remaining() // 24:
        raise ShortRead("GTID set sid count out of range")
    by_uuid: dict[str, list[str]] = {}
    for _ in range(n_sids):
        uuid = format_uuid(r.take(16))
        tag = r.take(r.varlen_uint()).decode("utf-8", "backslashreplace") if tagged else ""
        ranges = _intervals(r)
        by_uuid.setdefault(uuid, []).append(f"{tag}:{ranges}" if tag else ranges)
    return ",".join(f"{u}:{':'.join(parts)}" for u, parts in by_uuid.items())


def read_mariadb_gtid(r: Reader) -> tuple[int, int, int]:
    """(seq_no, domain_id, flags2) of a MariaDB GTID event; the rest is not needed."""
    return r.u64(), r.u32(), r.u8()


def read_mariadb_gtid_list(r: Reader) -> tuple[str, ...]:
    count = r.u32() & 0x0FFFFFFF
    if count > r.remaining() // 16:
        raise ShortRead("GTID list count out of range")
    out = []
    for _ in range(count):
        domain, server, seq = r.u32(), r.u32(), r.u64()
        out.append(f"{domain}-{server}-{seq}")
    return tuple(out)
