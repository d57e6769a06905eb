"""Table definitions as the capture layer needs them: names, types, flags."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ColumnDef", "TableDef", "SYSTEM_PERIOD", "with_system_period"]


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
    # "row_start" / "row_end": a system-versioned table's hidden period column, which
    # information_schema does not list (MariaDB's implicit WITH SYSTEM VERSIONING)
    system: str | None = None

    def to_json(self) -> dict:
        out = {"name": self.name, "type": self.data_type}
        for key in ("column_type", "length", "precision", "scale", "fsp", "charset", "system"):
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
            generated=d.get("generated", False), system=d.get("system"),
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
        """The key that names a row: the primary key's columns, but for a system-versioned
        table's row_end, which the server adds to it (a row's old versions share the rest
        and are not output)."""
        return tuple(c.name for c in self.columns if c.is_primary_key and c.system != "row_end")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def key_signature(self) -> tuple:
        """What the envelope's ``key`` of a row of this table is made of: the key's columns
        (every column for a table without a primary key) and how each one's value is
        written. Where a DDL changes it, the same row has another key text after it than
        before (``SchemaKeeper`` then reads the table again, DESIGN.md decision 33)."""
        names = self.primary_key or self.column_names
        by_name = {c.name: c for c in self.columns}
        return tuple((n, _written_as(by_name[n])) for n in names)

    @property
    def versioned(self) -> bool:
        """A system-versioned table (its hidden ``row_end`` column is listed)."""
        return any(c.system == "row_end" for c in self.columns)


# The two columns MariaDB adds, hidden and last, to a table made WITH SYSTEM VERSIONING
# without naming its period's columns: the row version's start and end. A current row's
# end is the greatest TIMESTAMP(6); a history row's is when it stopped being current.
SYSTEM_PERIOD = tuple(
    ColumnDef(name, "timestamp", nullable=False, column_type="timestamp(6)", fsp=6,
              invisible=True, generated=True, system=name)
    for name in ("row_start", "row_end"))


def with_system_period(table: TableDef, versioned: bool = True) -> TableDef:
    """``table`` with its hidden period columns last (``versioned``) or without them."""
    plain = tuple(c for c in table.columns if c.system is None)
    columns = plain + SYSTEM_PERIOD if versioned else plain
    return TableDef(table.db, table.name, columns, table.charset)


_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_TEXTS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})


def _written_as(c: ColumnDef) -> str:
    """How a column's values are written in the envelope, as far as a DDL can change
    it: every integer type alike (a number), every text type in a character set and
    ENUM alike (the characters), a DECIMAL by its scale, anything else by its full
    type."""
    if c.data_type in _INTEGERS:
        return "integer"
    if (c.data_type in _TEXTS and c.charset != "binary") or c.data_type == "enum":
        return "text"                       # an ENUM is written as its label
    if c.data_type == "set":
        return "labels"
    if c.data_type in ("decimal", "numeric"):
        return f"decimal,{c.scale}"         # written with exactly its scale's decimals
    return c.column_type or c.data_type
