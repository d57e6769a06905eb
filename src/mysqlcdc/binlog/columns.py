"""What the row decoder needs to know about each column of a TABLE_MAP.

``resolve_columns`` merges the TABLE_MAP's types and metadata with its optional
metadata and, where that is missing, with the ``TableDef`` the caller supplies.
Optional metadata wins when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..schema.model import TableDef
from . import constants as C
from .values.charsets import codec_for_charset, codec_for_collation
from .values.fixedbin import FIXED_TEXT_TYPES

__all__ = ["ColumnSpec", "real_type", "resolve_columns", "SchemaMismatch"]


class SchemaMismatch(ValueError):
    """The supplied TableDef cannot describe the TABLE_MAP's columns."""


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column as the row decoder sees it (hashable: part of the decoder cache key)."""

    name: str
    type: int                    # real type: STRING's ENUM/SET resolved
    meta: int                    # type-specific: length, (precision<<8|scale), fsp ...
    unsigned: bool = False
    codec: str | None = "utf-8"  # None = binary (base64)
    enum_labels: tuple[str, ...] | None = None
    set_labels: tuple[str, ...] | None = None
    text_form: str | None = None  # a MariaDB INET6/INET4/UUID: written as its text


def real_type(col_type: int, meta: int) -> tuple[int, int]:
    """(real type, length) of a STRING column whose meta hides ENUM/SET and long CHARs."""
    if col_type != C.MYSQL_TYPE_STRING:
        return col_type, meta
    b0, b1 = meta >> 8, meta & 0xFF
    if b0 == 0:
        return C.MYSQL_TYPE_STRING, b1
    if (b0 & 0x30) != 0x30:
        return b0 | 0x30, b1 | (((b0 & 0x30) ^ 0x30) << 4)
    return b0, b1


def is_character(t: int, mariadb: bool) -> bool:
    """Counted in the charset metadata; MariaDB counts GEOMETRY (a BLOB to it), MySQL does not."""
    return t in C.CHARACTER_TYPES or (mariadb and t == C.MYSQL_TYPE_GEOMETRY)


def is_numeric(t: int, mariadb: bool) -> bool:
    return t in C.NUMERIC_TYPES or (mariadb and t == C.MYSQL_TYPE_YEAR)


def _collations(opt: dict[str, Any], default_key: str, column_key: str, n: int) -> list[int | None]:
    """Per-column collation ids of the n columns of one class (character or enum/set)."""
    if column_key in opt:
        ids = list(opt[column_key])[:n]
        return ids + [None] * (n - len(ids))
    if default_key in opt:
        default, exceptions = opt[default_key]
        ids = [default] * n
        for idx, coll in exceptions:
            if 0 <= idx < n:
                ids[idx] = coll
        return ids
    return [None] * n


def _per_class(values: list, mask: list[bool]) -> list:
    """Spread a list over the columns flagged in ``mask`` (others get None)."""
    it = iter(values)
    return [next(it, None) if m else None for m in mask]


def resolve_columns(
    column_types: bytes, metas: tuple[int, ...], opt: dict[str, Any],
    table: TableDef | None, mariadb: bool,
) -> tuple[ColumnSpec, ...]:
    """ColumnSpecs for a TABLE_MAP, optional metadata first, then ``table``."""
    n = len(column_types)
    reals = [real_type(t, m) for t, m in zip(column_types, metas)]
    types = [r[0] for r in reals]
    defs = _table_columns(table, n)
    char = [is_character(t, mariadb) for t in types]
    enumset = [t in C.ENUM_SET_TYPES for t in types]
    numeric = [is_numeric(t, mariadb) for t in types]
    char_colls = _per_class(_collations(opt, "default_charset", "column_charset", sum(char)), char)
    es_colls = _per_class(_collations(opt, "enum_and_set_default_charset",
                                      "enum_and_set_column_charset", sum(enumset)), enumset)
    signed = _per_class(list(opt.get("signedness", ())), numeric)
    enums = _per_class(list(opt.get("enum_str_value", ())), [t == C.MYSQL_TYPE_ENUM for t in types])
    sets = _per_class(list(opt.get("set_str_value", ())), [t == C.MYSQL_TYPE_SET for t in types])
    names = opt.get("column_name")
    specs = []
    for i, (t, length) in enumerate(reals):
        d = defs[i]
        name = names[i] if names and i < len(names) else (d.name if d else f"@{i + 1}")
        unsigned = signed[i] if signed[i] is not None else bool(d and d.unsigned)
        coll = char_colls[i] if char[i] else es_colls[i]
        if coll is not None:
            codec = codec_for_collation(coll)
        else:
            codec = codec_for_charset(d.charset if d else None)
        enum_labels = tuple(enums[i]) if enums[i] is not None else (d.enum_values if d and d.enum_values else None)
        set_labels = tuple(sets[i]) if sets[i] is not None else (d.set_values if d and d.set_values else None)
        meta = length if column_types[i] == C.MYSQL_TYPE_STRING else metas[i]
        # INET6, INET4 and UUID are logged as BINARY(n); only the definition tells them
        form = d.data_type if d is not None and t == C.MYSQL_TYPE_STRING and \
            d.data_type in FIXED_TEXT_TYPES else None
        specs.append(ColumnSpec(name, t, meta, unsigned, codec, enum_labels, set_labels, form))
    return tuple(specs)


def _table_columns(table: TableDef | None, n: int) -> list:
    """TableDef columns aligned with the TABLE_MAP; extra TABLE_MAP columns (hidden
    functional-index columns that information_schema does not list) get none."""
    if table is None:
        return [None] * n
    cols = list(table.columns)
    if len(cols) > n:
        raise SchemaMismatch(
            f"table {table.db}.{table.name} has {len(cols)} columns in the schema but {n} in "
            "the binlog TABLE_MAP")
    return cols + [None] * (n - len(cols))
