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
    length: int | None = None      # characters for strings, bytes for binary, bits for BIT
    precision: int | None = None   # DECIMAL precision
    scale: int | None = None       # DECIMAL scale
    fsp: int | None = None         # fractional seconds of TIME/DATETIME/TIMESTAMP
    invisible: bool = False
    generated: bool = False        # VIRTUAL or STORED generated column

    def to_json(self) -> dict:
        out = {"name": self.name, "type": self.data_type}
        for key in ("column_type", "length", "precision", "scale", "fsp", "charset"):
            value = getattr(self, key)
            if value not in (None, ""):
                out[key] = value
        for key in ("unsigned", "is_primary_key", "invisible", "generated"):
            if getattr(self, key):
                out[key] = True
        if not self.nullable:
            out["nullable"] = False
        if self.enum_values:
            out["enum_values"] = list(self.enum_values)
        if self.set_values:
            out["set_values"] = list(self.set_values)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "ColumnDef":
        return cls(
            name=d["name"], data_type=d["type"], unsigned=d.get("unsigned", False),
            charset=d.get("charset"), enum_values=tuple(d.get("enum_values", ())),
            set_values=tuple(d.get("set_values", ())), is_primary_key=d.get("is_primary_key", False),
            nullable=d.get("nullable", True), column_type=d.get("column_type", ""),
            length=d.get("length"), precision=d.get("precision"), scale=d.get("scale"),
            fsp=d.get("fsp"), invisible=d.get("invisible", False),
            generated=d.get("generated", False),
        )


@dataclass(frozen=True, slots=True)
class TableDef:
    db: str
    name: str
    columns: tuple[ColumnDef, ...] = field(default_factory=tuple)
    charset: str | None = None     # the table's default character set

    def to_json(self) -> dict:
        out = {"db": self.db, "table": self.name, "columns": [c.to_json() for c in self.columns]}
        if self.charset:
            out["charset"] = self.charset
        return out

    @classmethod
    def from_json(cls, d: dict) -> "TableDef":
        return cls(d["db"], d["table"], tuple(ColumnDef.from_json(c) for c in d["columns"]),
                   charset=d.get("charset"))

    @property
    def primary_key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.is_primary_key)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)
