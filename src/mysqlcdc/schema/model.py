"""Table definitions as the capture layer needs them: names, types, flags."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ColumnDef", "TableDef"]


@dataclass(frozen=True, slots=True)
class ColumnDef:
    """One column as ``information_schema.COLUMNS`` describes it.

    ``data_type`` is the lower-case base type (``int``, ``varchar``, ``enum`` ...),
    ``charset`` the column's character set name (``utf8mb4``, ``latin1``,
    ``binary``) or None for non-string columns.
    """

    name: str
    data_type: str
    unsigned: bool = False
    charset: str | None = None
    enum_values: tuple[str, ...] = ()
    set_values: tuple[str, ...] = ()
    is_primary_key: bool = False
    nullable: bool = True
    column_type: str = ""          # full COLUMN_TYPE text, e.g. "decimal(10,2) unsigned"


@dataclass(frozen=True, slots=True)
class TableDef:
    db: str
    name: str
    columns: tuple[ColumnDef, ...] = field(default_factory=tuple)

    @property
    def primary_key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.is_primary_key)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)
