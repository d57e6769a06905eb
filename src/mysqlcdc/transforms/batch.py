"""A record batch of envelope rows on its way through a chain of transforms.

The row images (``before``, ``after``, ``key``, ``moved_key``) are JSON text. A
built-in that reads or edits them asks :meth:`EventBatch.images` for the rows it
needs: those are parsed in one orjson call per column and kept, so a chain of
built-ins parses each image at most once and writes back only the images it changed,
with one orjson call each, when the batch leaves the chain (:meth:`to_batch`). Rows
are picked with Arrow kernels (by table, by op), never by a Python test per row.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Iterable

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.envelope.model import ROW_OPS

__all__ = ["EventBatch", "ColumnPattern", "IMAGE_COLUMNS", "UNPARSED", "parse_json_column"]

IMAGE_COLUMNS = ("before", "after", "key", "moved_key")


class _Unparsed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNPARSED"


UNPARSED = _Unparsed()
_loads, _dumps = orjson.loads, orjson.dumps


class EventBatch:
    """An envelope record batch plus the images parsed so far."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self._parsed: dict[str, list] = {}
        self._dirty: set[str] = set()
        self._fresh: set[str] = set()      # parsed lists not touched yet: nothing to skip
        self._names: pa.Array | None = None

    @property
    def num_rows(self) -> int:
        return self.batch.num_rows

    def column(self, name: str) -> pa.Array:
        return self.batch.column(name)

    def has(self, name: str) -> bool:
        return name in self.batch.schema.names

    # --- selecting rows ---------------------------------------------------------

    def table_names(self) -> pa.Array:
        """``db.table`` per row (computed once)."""
        if self._names is None:
            self._names = pc.binary_join_element_wise(self.column("db"), self.column("table"), ".")
        return self._names

    def rows_of(self, tables: TableFilter | None, ops: Iterable[str] | None = ROW_OPS) -> np.ndarray:
        """Indices of the rows of matching tables (None: all) whose op is in ``ops``."""
        mask = self.mask_of(tables, ops)
        return np.flatnonzero(mask.to_numpy(zero_copy_only=False))

    def mask_of(self, tables: TableFilter | None, ops: Iterable[str] | None = ROW_OPS) -> pa.Array:
        """A boolean array: the row's table matches and its op is in ``ops``."""
        n = self.num_rows
        mask = pa.array(np.ones(n, dtype=bool))
        if ops is not None:
            mask = pc.is_in(self.column("op"), value_set=pa.array(list(ops), pa.string()))
        if tables is not None:
            names = self.table_names()
            unique = pc.unique(names).to_pylist()
            keep = [t for t in unique if t is not None and tables(*t.split(".", 1))]
            if len(keep) < len(unique):
                mask = pc.and_(mask, pc.is_in(names, value_set=pa.array(keep, pa.string())))
        return pc.fill_null(mask, False)

    # --- images -----------------------------------------------------------------

    def mentions(self, name: str, rows: np.ndarray, fields: Iterable[str]) -> np.ndarray:
        """Per row of ``rows``: does its ``name`` image text hold one of ``fields`` as a key?
        (An Arrow substring test: an image without it needs no parsing.)"""
        texts = self.column(name).take(pa.array(rows, pa.int64()))
        hit = None
        for field in fields:
            found = pc.match_substring(texts, _dumps(field).decode() + ":")
            hit = found if hit is None else pc.or_(hit, found)
        if hit is None:
            return np.zeros(len(rows), dtype=bool)
        return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)

    def images(self, name: str, rows: np.ndarray | None = None) -> list:
        """The parsed images of column ``name`` (a list as long as the batch): the rows
        in ``rows`` (default: all) are parsed dicts or None; others may be UNPARSED."""
        parsed = self._parsed.get(name)
        if parsed is None:
            parsed = self._parsed[name] = [UNPARSED] * self.num_rows
            self._fresh.add(name)
        if rows is None:
            rows = np.arange(self.num_rows)
        if name in self._fresh:
            self._fresh.discard(name)
            todo = rows.tolist()
        else:
            todo = [i for i in rows.tolist() if parsed[i] is UNPARSED]
        if todo:
            texts = self.column(name).take(pa.array(todo, pa.int64()))
            for i, value in zip(todo, parse_json_column(texts)):
                parsed[i] = value
        return parsed

    def changed(self, name: str) -> None:
        """Say that images of column ``name`` were edited in place (written back later)."""
        self._dirty.add(name)

    def set_column(self, name: str, values: pa.Array) -> None:
        """Add or replace a column; a replaced image column forgets what was parsed."""
        names = self.batch.schema.names
        if name in names:
            self.batch = self.batch.set_column(names.index(name), name, values)
        else:
            self.batch = self.batch.append_column(name, values)
        self._parsed.pop(name, None)
        self._dirty.discard(name)
        if name in ("db", "table"):
            self._names = None

    # --- reshaping --------------------------------------------------------------

    def filter(self, mask: pa.Array) -> "EventBatch":
        """The rows where ``mask`` is true, with what was parsed of them."""
        self._flush()
        keep = np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
        out = EventBatch(self.batch.filter(pa.array(keep)))
        for name, values in self._parsed.items():
            out._parsed[name] = [v for v, k in zip(values, keep) if k]
        return out

    def to_batch(self) -> pa.RecordBatch:
        """The record batch, edited images written back as JSON text."""
        self._flush()
        return self.batch

    def _flush(self) -> None:
        for name in sorted(self._dirty):
            parsed = self._parsed[name]
            rows = [i for i, v in enumerate(parsed) if v is not UNPARSED]
            if rows:
                texts = pa.array([None if parsed[i] is None else _dumps(parsed[i]) for i in rows],
                                 pa.binary()).cast(pa.string())
                mask = np.zeros(self.num_rows, dtype=bool)
                mask[rows] = True
                column = pc.replace_with_mask(self.column(name), pa.array(mask), texts)
                names = self.batch.schema.names
                self.batch = self.batch.set_column(names.index(name), name, column)
        self._dirty.clear()


def parse_json_column(texts: pa.Array) -> list:
    """JSON texts (nulls allowed) -> Python values, in one orjson call."""
    filled = pc.fill_null(texts, "null")
    one_list = pa.ListArray.from_arrays(pa.array([0, len(filled)], pa.int32()), filled)
    joined = pc.binary_join(one_list, ",")[0]
    return _loads(b"[" + joined.as_buffer().to_pybytes() + b"]")


class ColumnPattern:
    """``db.table.column`` with fnmatch globs on each part: which image fields a
    built-in acts on (``shop.user.email``, ``*.*.phone``, ``shop.*.card_*``)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        parts = []
        for p in self.patterns:
            db, table, column = _split3(p)
            parts.append((f"{db}.{table}", column))
        self._parts = parts
        self.tables = TableFilter(tuple(dict.fromkeys(t for t, _ in parts)))
        self._memo: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}
        self._exact: dict[str, tuple[str, ...]] = {}
        # every column part a plain name: an image's fields are found by lookup
        self.exact = not any(any(c in col for c in "*?[") for _, col in parts)

    def names_for(self, table_name: str) -> tuple[str, ...]:
        """With plain column names: those the patterns name for ``db.table``."""
        hit = self._exact.get(table_name)
        if hit is None:
            db, table = table_name.split(".", 1)
            hit = self._exact[table_name] = tuple(dict.fromkeys(
                c for t, c in self._parts if _table_matches(t, db, table)))
        return hit

    def fields(self, table_name: str, keys: Iterable[str]) -> tuple[str, ...]:
        """The fields of an image of ``db.table`` (its ``keys``) that the patterns name."""
        if self.exact:
            return tuple(f for f in self.names_for(table_name) if f in keys)
        keys = tuple(keys)
        memo_key = (table_name, keys)
        hit = self._memo.get(memo_key)
        if hit is None:
            db, table = table_name.split(".", 1)
            hit = tuple(k for k in keys if any(
                _table_matches(t, db, table) and fnmatchcase(k, c) for t, c in self._parts))
            if len(self._memo) < 4096:
                self._memo[memo_key] = hit
        return hit


def _table_matches(pattern: str, db: str, table: str) -> bool:
    pdb, _, ptable = pattern.partition(".")
    return fnmatchcase(db, pdb) and fnmatchcase(table, ptable)


def _split3(pattern: str) -> tuple[str, str, str]:
    parts = pattern.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"a column pattern looks like db.table.column (globs allowed), "
                         f"got {pattern!r}")
    return parts[0], parts[1], parts[2]
