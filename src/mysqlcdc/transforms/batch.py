"""A record batch of envelope rows on its way through a chain of transforms.

The row images (``before``, ``after``, ``key``, ``moved_key``) are JSON text. A
built-in that reads or edits them asks :meth:`EventBatch.images` for the rows it
needs: those are parsed in one orjson call per column and kept, so a chain of
built-ins parses each image at most once and writes back only the images it changed,
with one orjson call each, when the batch leaves the chain (:meth:`to_batch`). Rows
are picked with Arrow kernels (by table, by op), never by a Python test per row.

Most built-ins touch one or two fields of a wide image, so before parsing whole images
they try the text itself (:meth:`EventBatch.edit_field`, :meth:`EventBatch.field_values`):
a substring search and one regex anchored at the key find a named top-level field's
value in every image at once (:func:`_find_values`), and an edit splices the new value's
JSON text in its place (:func:`_splice`). This works because the envelope's
images are compact JSON objects (no whitespace, a quote inside a string always
escaped): ``{"KEY":`` or ``,"KEY":`` with no ``{`` before it can only be that top-level
key. An image the regex cannot answer for (a ``{`` in the text before the key, or a
value that is an array, an object or, for an edit, a float or a boolean) is parsed as
before, so the result never depends on which way a row went.
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

    def is_parsed(self, name: str) -> bool:
        """Have images of column ``name`` been parsed (then edits go through the dicts)?"""
        return name in self._parsed

    def edit_field(self, name: str, rows: np.ndarray, field: str, edit) -> np.ndarray:
        """Replace the value of top-level ``field`` in the ``name`` images of ``rows``
        (ascending) in their JSON text, without parsing them.

        ``edit(values)`` gets the old values' JSON texts (a string array: a string, an
        integer or ``null``) and returns the new ones. Returns the rows whose image
        holds ``field`` but could not be edited as text (the caller edits those parsed);
        rows without the field are left alone."""
        if name in self._parsed or not len(rows):
            return rows
        texts = self.column(name).take(pa.array(rows, pa.int64()))
        spots = _find_values(texts, field, _EDIT_VALUE)
        if spots is None:
            return rows[:0]
        mentioned, hit, starts, values = spots
        if hit.any():
            sub = texts.filter(pa.array(hit))
            new = edit(values)
            spliced = _splice(sub, starts, pc.binary_length(values).to_numpy(), new)
            mask = np.zeros(self.num_rows, dtype=bool)
            mask[rows[hit]] = True
            column = pc.replace_with_mask(self.column(name), pa.array(mask), spliced)
            self.batch = self.batch.set_column(self.batch.schema.names.index(name), name,
                                               column)
        return rows[mentioned & ~hit]

    def field_values(self, name: str, field: str, rows: np.ndarray | None = None) -> list:
        """The value of top-level ``field`` in the ``name`` image of each row of ``rows``
        (default: all), None where the image is null or lacks it: read from the text
        where a regex can, from parsed images where it cannot."""
        index = np.arange(self.num_rows) if rows is None else rows
        if name in self._parsed:
            images = self.images(name, index)
            return [None if (img := images[i]) is None else img.get(field)
                    for i in index.tolist()]
        out: list = [None] * len(index)
        texts = self.column(name).take(pa.array(index, pa.int64()))
        spots = _find_values(texts, field, _READ_VALUE)
        if spots is None:
            return out
        mentioned, hit, _, values = spots
        if hit.any():
            for j, value in zip(np.flatnonzero(hit).tolist(), parse_json_column(values)):
                out[j] = value
        left = np.flatnonzero(mentioned & ~hit)
        if len(left):
            images = self.images(name, index[left])
            for j, i in zip(left.tolist(), index[left].tolist()):
                image = images[i]
                out[j] = None if image is None else image.get(field)
        return out

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


def _key_text(field: str) -> str:
    """A field's key as it starts a member of a compact JSON object: ``"name":``."""
    return _dumps(field).decode() + ":"


def _re2_literal(text: str) -> str:
    return "".join("\\" + c if c in "\\.^$|?*+()[]{}" else c for c in text)


# what an edit may replace as text: a string, an integer, null
_EDIT_VALUE = r'"(?:[^"\\]|\\.)*"|-?[1-9][0-9]*|0|null'
# what a read takes from the text: any string, number, true, false, null
_READ_VALUE = r'"(?:[^"\\]|\\.)*"|-?[0-9][-+.0-9eE]*|true|false|null'


def _offsets(texts: pa.Array) -> np.ndarray:
    return np.frombuffer(texts.buffers()[1], dtype=np.int32)[texts.offset:texts.offset + len(texts) + 1]


def _cut(texts: pa.Array, a: np.ndarray, b: np.ndarray) -> pa.StringArray:
    """Each text cut at its byte offsets ``a`` <= ``b`` into three pieces (text[:a],
    text[a:b], text[b:]), as one string array over the same bytes: nothing is copied."""
    offsets = _offsets(texts)
    n = len(texts)
    cuts = np.empty(3 * n + 1, dtype=np.int32)
    cuts[0:3 * n:3] = offsets[:-1]
    cuts[1::3] = offsets[:-1] + a
    cuts[2::3] = offsets[:-1] + b
    cuts[3 * n] = offsets[-1]
    return pa.StringArray.from_buffers(3 * n, pa.py_buffer(cuts), texts.buffers()[2])


def _find_values(texts: pa.Array, field: str, value_pattern: str):
    """Where top-level ``field``'s value is in each JSON text, found without parsing.

    None when no text holds the key, else (mentioned, hit, starts, values): per text,
    does ``"field":`` follow ``{`` or ``,`` in it; is that the top-level member (no
    ``{`` between the text's first character and it) with a value ``value_pattern``
    matches; and, for the hits, the value's byte offset in its text and its JSON text.
    Each text is cut (without copying) into its first character, the rest up to the
    key, and the rest from the key on: Arrow then looks for a ``{`` in the middle
    pieces and runs one regex anchored at the key, over the key and value only."""
    key = _key_text(field)
    first = pc.fill_null(pc.starts_with(texts, "{" + key), False).to_numpy(zero_copy_only=False)
    later = pc.fill_null(pc.find_substring(texts, "," + key), -1).to_numpy(zero_copy_only=False)
    at = np.where(first, 1, np.where(later >= 0, later + 1, -1)).astype(np.int32)
    mentioned = at >= 0
    if not mentioned.any():
        return None
    n = len(texts)
    lengths = np.diff(_offsets(texts))
    pieces = _cut(texts, np.minimum(1, lengths), np.where(mentioned, at, lengths))
    middle = pieces.take(pa.array(np.arange(1, 3 * n, 3)))
    flat = pc.equal(pc.find_substring(middle, "{"), -1).to_numpy(zero_copy_only=False)
    tails = pieces.take(pa.array(np.arange(2, 3 * n, 3)))
    found = pc.extract_regex(tails, "(?s)^" + _re2_literal(key) + "(?P<v>" + value_pattern
                             + ")[,}]")
    hit = mentioned & flat & pc.is_valid(found).to_numpy(zero_copy_only=False)
    values = found.filter(pa.array(hit)).field("v")
    starts = at[hit] + len(key.encode())
    return mentioned, hit, starts, values


def _splice(texts: pa.Array, starts: np.ndarray, lengths: np.ndarray, new: pa.Array) -> pa.Array:
    """Each text with ``lengths`` bytes from byte ``starts`` replaced by ``new``: the
    texts are cut (without copying) into head, old value and tail, the old values are
    swapped for the new, and each three are joined."""
    n = len(texts)
    pieces = _cut(texts, starts, starts + lengths)
    middle = np.zeros(3 * n, dtype=bool)
    middle[1::3] = True
    pieces = pc.replace_with_mask(pieces, pa.array(middle), new)
    triples = pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)),
                                       pieces)
    return pc.binary_join(triples, "")


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
