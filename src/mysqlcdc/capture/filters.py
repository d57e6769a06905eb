"""Which tables a pipeline captures: ``db.table`` glob patterns."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["TableFilter", "validate_pattern"]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
_MEMO_SIZE = 1 << 16


def validate_pattern(pattern: str) -> str:
    """A pattern is ``DB.TABLE`` where either side may use ``*``, ``?`` and ``[...]``."""
    db, sep, table = pattern.partition(".")
    if not sep or not db or not table or "." in table:
        raise ValueError(f"table pattern must look like db.table (globs allowed), got {pattern!r}")
    return pattern


@dataclass(frozen=True)
class TableFilter:
    """``include`` minus ``exclude``; names compare case-sensitively, as MySQL on Linux,
    and a glob never crosses the dot (``s*.t`` does not match ``shop.x.t``).

    System schemas are never captured unless named explicitly.

    >>> f = TableFilter(("shop.*",), ("shop.tmp_*",))
    >>> f("shop", "orders"), f("shop", "tmp_x"), f("crm", "users")
    (True, False, False)
    """

    include: tuple[str, ...] = ("*.*",)
    exclude: tuple[str, ...] = ()
    # tables read whatever the patterns say (the signal table), as (db, table)
    also: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for p in (*self.include, *self.exclude):
            validate_pattern(p)
        # answers by (db, table): asked on every TABLE_MAP, and globs cost microseconds
        object.__setattr__(self, "_memo", {})

    def __call__(self, db: str, table: str) -> bool:
        key = (db, table)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._match(db, table)
            if len(self._memo) < _MEMO_SIZE:
                self._memo[key] = hit
        return hit

    def _match(self, db: str, table: str) -> bool:
        return (db, table) in self.also or self.user(db, table)

    def user(self, db: str, table: str) -> bool:
        """The patterns alone: a table the user captures (``also`` left out)."""
        if db in SYSTEM_SCHEMAS and not any(p.split(".")[0] == db for p in self.include):
            return False
        return _any(self.include, db, table) and not _any(self.exclude, db, table)

    @classmethod
    def exact(cls, db: str, table: str) -> "TableFilter":
        """Exactly one table, whatever characters its name holds."""
        return cls((f"{_escape(db)}.{_escape(table)}",))

    @classmethod
    def parse(cls, include: str | None, exclude: str | None,
              also: tuple[tuple[str, str], ...] = ()) -> "TableFilter":
        """From comma-separated option strings (the Spark option form)."""
        inc = tuple(p.strip() for p in (include or "*.*").split(",") if p.strip())
        exc = tuple(p.strip() for p in (exclude or "").split(",") if p.strip())
        return cls(inc or ("*.*",), exc, also)


def _escape(name: str) -> str:
    """A name as a glob that matches only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _any(patterns: tuple[str, ...], db: str, table: str) -> bool:
    for pattern in patterns:
        pdb, _, ptable = pattern.partition(".")
        if fnmatchcase(db, pdb) and fnmatchcase(table, ptable):
            return True
    return False
