"""GTID sets of both flavours, as values: parse, format, add, contain.

MariaDB and MySQL mean different things by a GTID "position":

* **MariaDB** ``domain-server-seq[,...]``: per replication domain, the last transaction
  applied (``@@gtid_slave_pos`` semantics). Inside a domain sequence numbers grow in
  binlog order on every server of a topology, so ``0-1-100`` contains every ``0-*-n``
  with ``n <= 100``. A binlog *state* (``@@gtid_binlog_state``, a GTID_LIST event) may
  list several servers per domain; as a position its highest sequence number counts.
* **MySQL** ``uuid[:tag]:interval[:interval...][,...]`` (tags since 8.3): the set of
  every transaction executed, as intervals per source uuid and tag.

>>> s = GtidSet.parse("0-1-100,1-2-5")
>>> s.contains("0-7-99"), s.contains("1-2-6")
(True, False)
>>> str(s.add("1-2-6"))
'0-1-100,1-2-6'
>>> m = GtidSet.parse("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7")
>>> m.contains("3e11fa47-71ca-11e1-9e33-c80aa9429562:6"), str(m.add("3e11fa47-71ca-11e1-9e33-c80aa9429562:6"))
(False, '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["GtidSet", "looks_like_gtid_set"]

_MARIA = re.compile(r"^\d+-\d+-\d+$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")


def looks_like_gtid_set(text: str) -> bool:
    """True when ``text`` parses as a GTID set of either flavour (and is not empty)."""
    try:
        return bool(text.strip()) and not GtidSet.parse(text).empty
    except ValueError:
        return False


@dataclass(frozen=True)
class GtidSet:
    """An immutable GTID set; ``flavor`` is ``mariadb``, ``mysql`` or None (empty)."""

    flavor: str | None = None
    # mariadb: domain -> (server_id, seq); mysql: (uuid, tag) -> ((lo, hi), ...) sorted
    maria: tuple[tuple[int, int, int], ...] = field(default=())
    mysql: tuple[tuple[str, str, tuple[tuple[int, int], ...]], ...] = field(default=())

    # -- parsing and text ------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "GtidSet":
        """Either flavour's text form; whitespace and newlines (as servers print long
        sets) are ignored. Raises ValueError for anything else."""
        parts = [p for p in re.sub(r"\s+", "", str(text)).split(",") if p]
        if not parts:
            return cls()
        if all(_MARIA.match(p) for p in parts):
            out: dict[int, tuple[int, int]] = {}
            for p in parts:
                d, s, n = (int(x) for x in p.split("-"))
                if d not in out or n >= out[d][1]:
                    out[d] = (s, n)
            return cls._maria(out)
        sets: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for p in parts:
            uuid, *rest = p.split(":")
            if not _UUID.match(uuid) or not rest:
                raise ValueError(f"not a GTID set: {text!r} (MariaDB domain-server-seq or "
                                 "MySQL uuid:1-5)")
            tag = ""
            for item in rest:
                m = _INTERVAL.match(item)
                if m is None:
                    if not _TAG.match(item):
                        raise ValueError(f"not a GTID set: {text!r} (bad interval or tag "
                                         f"{item!r})")
                    tag = item.lower()
                    continue
                lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                if lo < 1 or hi < lo:
                    raise ValueError(f"not a GTID set: {text!r} (interval {item!r})")
                sets.setdefault((uuid.lower(), tag), []).append((lo, hi))
        return cls._mysql(sets)

    @classmethod
    def _maria(cls, pos: dict[int, tuple[int, int]]) -> "GtidSet":
        return cls("mariadb", maria=tuple((d, s, n) for d, (s, n) in sorted(pos.items())))

    @classmethod
    def _mysql(cls, sets: dict[tuple[str, str], list[tuple[int, int]]]) -> "GtidSet":
        norm = []
        for (uuid, tag), ranges in sorted(sets.items()):
            merged: list[list[int]] = []
            for lo, hi in sorted(ranges):
                if merged and lo <= merged[-1][1] + 1:
                    merged[-1][1] = max(merged[-1][1], hi)
                else:
                    merged.append([lo, hi])
            norm.append((uuid, tag, tuple((a, b) for a, b in merged)))
        return cls("mysql" if norm else None, mysql=tuple(norm))

    def __str__(self) -> str:
        if self.flavor == "mariadb":
            return ",".join(f"{d}-{s}-{n}" for d, s, n in self.maria)
        by_uuid: dict[str, list[str]] = {}
        for uuid, tag, ranges in self.mysql:
            text = ":".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
            by_uuid.setdefault(uuid, []).append(f"{tag}:{text}" if tag else text)
        return ",".join(f"{u}:{':'.join(parts)}" for u, parts in by_uuid.items())

    @property
    def empty(self) -> bool:
        return self.flavor is None

    # -- arithmetic ------------------------------------------------------------
    def contains(self, gtid: str) -> bool:
        """Is the single transaction ``gtid`` (``d-s-n`` or ``uuid[:tag]:n``) in the set?"""
        if _MARIA.match(gtid):
            d, _, n = (int(x) for x in gtid.split("-"))
            return any(dd == d and n <= nn for dd, _, nn in self.maria)
        uuid, tag, n = _split_mysql(gtid)
        for u, t, ranges in self.mysql:
            if (u, t) == (uuid, tag):
                return any(lo <= n <= hi for lo, hi in ranges)
        return False

    def add(self, gtid: str) -> "GtidSet":
        """The set with one more transaction."""
        if _MARIA.match(gtid):
            if self.flavor == "mysql":
                raise ValueError(f"cannot add MariaDB GTID {gtid} to a MySQL GTID set")
            d, s, n = (int(x) for x in gtid.split("-"))
            pos = {dd: (ss, nn) for dd, ss, nn in self.maria}
            if d not in pos or n >= pos[d][1]:
                pos[d] = (s, n)
            return self._maria(pos)
        if self.flavor == "mariadb":
            raise ValueError(f"cannot add MySQL GTID {gtid} to a MariaDB GTID set")
        uuid, tag, n = _split_mysql(gtid)
        sets = {(u, t): list(r) for u, t, r in self.mysql}
        sets.setdefault((uuid, tag), []).append((n, n))
        return self._mysql(sets)

    def add_all(self, gtids: list[str]) -> "GtidSet":
        """The set with every transaction of ``gtids`` (single GTIDs in binlog order);
        one pass over a micro-batch's transactions, however many there are."""
        if not gtids:
            return self
        if _MARIA.match(gtids[0]) and self.flavor != "mysql":
            last: dict[str, str] = {}
            for g in gtids:                 # in binlog order the last one per domain wins
                last[g[:g.index("-")]] = g
            pos = {d: (s, n) for d, s, n in self.maria}
            for g in last.values():
                d, s, n = (int(x) for x in g.split("-"))
                if d not in pos or n >= pos[d][1]:
                    pos[d] = (s, n)
            return self._maria(pos)
        if self.flavor == "mariadb":
            raise ValueError(f"cannot add MySQL GTID {gtids[0]} to a MariaDB GTID set")
        numbers: dict[str, list[int]] = {}
        for g in gtids:                      # "uuid[:tag]" -> its numbers, checked once
            prefix, _, n = g.rpartition(":")
            numbers.setdefault(prefix, []).append(int(n))
        sets = {(u, t): list(r) for u, t, r in self.mysql}
        for prefix, found in numbers.items():
            uuid, tag, _ = _split_mysql(f"{prefix}:1")
            found.sort()
            ranges = sets.setdefault((uuid, tag), [])
            lo = hi = found[0]
            for n in found[1:]:
                if n > hi + 1:
                    ranges.append((lo, hi))
                    lo = n
                hi = max(hi, n)
            ranges.append((lo, hi))
        return self._mysql(sets)

    def union(self, other: "GtidSet") -> "GtidSet":
        """This set followed by ``other`` (transactions after these, in binlog order: for
        MariaDB a domain's position moves to ``other``'s, as ``add`` moves it)."""
        if other.empty:
            return self
        if self.empty:
            return other
        if other.flavor != self.flavor:
            raise ValueError(f"cannot join a {other.flavor} GTID set to a {self.flavor} one")
        if self.flavor == "mariadb":
            pos = {d: (s, n) for d, s, n in self.maria}
            for d, s, n in other.maria:
                if d not in pos or n >= pos[d][1]:
                    pos[d] = (s, n)
            return self._maria(pos)
        sets = {(u, t): list(r) for u, t, r in self.mysql}
        for u, t, ranges in other.mysql:
            sets.setdefault((u, t), []).extend(ranges)
        return self._mysql(sets)

    def issubset(self, other: "GtidSet") -> bool:
        """Is every transaction of this set in ``other``? (The empty set is in any.)"""
        if self.empty:
            return True
        if other.flavor != self.flavor:
            return False
        if self.flavor == "mariadb":
            theirs = {d: n for d, _, n in other.maria}
            return all(d in theirs and n <= theirs[d] for d, _, n in self.maria)
        theirs_m = {(u, t): r for u, t, r in other.mysql}
        return all(any(a <= lo and hi <= b for a, b in theirs_m.get((u, t), ()))
                   for u, t, ranges in self.mysql for lo, hi in ranges)

    def domains(self) -> dict[int, int]:
        """MariaDB: domain -> the sequence number the position stands at."""
        return {d: n for d, _, n in self.maria}


def _split_mysql(gtid: str) -> tuple[str, str, int]:
    parts = gtid.split(":")
    if len(parts) not in (2, 3) or not _UUID.match(parts[0]) or not parts[-1].isdigit():
        raise ValueError(f"not a single GTID: {gtid!r}")
    return parts[0].lower(), parts[1].lower() if len(parts) == 3 else "", int(parts[-1])
