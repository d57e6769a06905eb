"""Built-in transforms, each over a whole batch.

Rows are chosen with Arrow kernels (by table, by op, by a predicate); values are
computed with Arrow kernels over the chosen rows' values (lengths, slices, repeats,
one SHA-256 per *distinct* value for ``hash``). Row images are parsed once per
batch and written back once (see :class:`~mysqlcdc.transforms.batch.EventBatch`), so
a chain of built-ins costs one parse and one write of the images it touches.

Built-ins that edit images act on row changes (``op`` c, u, d, r) and on the
``before``, ``after``, ``key`` and ``moved_key`` images alike, so a masked column is
masked in the key too; schema-change and truncate records pass unchanged.
"""

from __future__ import annotations

import hashlib
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.envelope.model import ROW_OPS
from mysqlcdc.transforms.api import Transform, TransformContext
from mysqlcdc.transforms.batch import IMAGE_COLUMNS, ColumnPattern, EventBatch, parse_json_column
from mysqlcdc.transforms.expressions import Expression, Ref, evaluate, evaluate_values, parse

__all__ = ["Mask", "Hash", "Truncate", "DropColumns", "Rename", "Filter", "Route", "AddField",
           "ARROW_TYPES"]

ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(),
               "boolean": pa.bool_()}


def _selected(events: EventBatch, pattern: ColumnPattern) -> tuple[np.ndarray, list] | None:
    """The rows of the tables a column pattern names, and their ``db.table`` names."""
    rows = events.rows_of(pattern.tables)
    if not len(rows):
        return None
    return rows, events.table_names().take(pa.array(rows)).to_pylist()


def _tables(patterns: Iterable[str] | None) -> TableFilter | None:
    patterns = tuple(patterns or ())
    return TableFilter(patterns) if patterns else None


# --- editing the values of named columns -------------------------------------


class _ColumnEdit(Transform):
    """Replace the values of the image fields named by ``columns`` patterns."""

    def __init__(self, columns: Iterable[str]) -> None:
        self.pattern = ColumnPattern(columns)

    def new_values(self, values: list) -> list:
        raise NotImplementedError

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        selected = _selected(events, self.pattern)
        for column in IMAGE_COLUMNS if selected else ():
            if events.has(column):
                self._edit(events, column, *selected)
        return events

    def _edit(self, events: EventBatch, column: str, rows: np.ndarray, names: list) -> None:
        pattern = self.pattern
        if not pattern.exact:
            self._edit_parsed(events, column, [(rows, names, None)])
            return
        # plain column names: each field's rows are edited in their JSON text where a
        # regex can (one Arrow pass per field); the rest are parsed and edited as dicts
        by_field: dict[str, list[np.ndarray]] = {}
        of_name = np.array(names, dtype=object)
        for n in set(names):
            for f in pattern.names_for(n):
                by_field.setdefault(f, []).append(rows[of_name == n])
        left = []
        for f, parts in by_field.items():
            frows = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
            frows = events.edit_field(column, frows, f, self.json_values)
            if len(frows):
                left.append((frows, None, f))
        if left:
            self._edit_parsed(events, column, left)

    def _edit_parsed(self, events: EventBatch, column: str,
                     groups: list[tuple[np.ndarray, list | None, str | None]]) -> None:
        """Edit parsed images: ``groups`` of (rows, their table names, one field) — a
        field of None means every field the patterns name in the image."""
        pattern = self.pattern
        every = np.unique(np.concatenate([rows for rows, _, _ in groups]))
        images = events.images(column, every)
        spots: list[tuple[dict, str]] = []
        add = spots.append
        for rows, names, field in groups:
            if field is not None:
                for i in rows.tolist():
                    image = images[i]
                    if image and field in image:
                        add((image, field))
                continue
            for i, name in zip(rows.tolist(), names):
                image = images[i]
                if image:
                    for f in pattern.fields(name, image):
                        add((image, f))
        if not spots:
            return
        new = self.new_values([image[f] for image, f in spots])
        for (image, f), value in zip(spots, new):
            image[f] = value
        events.changed(column)

    # editing JSON text: ``json_values`` maps old values' JSON texts (strings, integers,
    # null) to new ones, written as orjson writes them
    def json_values(self, values: pa.Array) -> pa.Array:
        raise NotImplementedError


def _json_texts(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """JSON texts of simple values (strings, integers, null) -> (their text as ``_text``
    gives it, is-a-string). Strings with escapes are decoded by orjson, the rest by
    slicing off their quotes."""
    is_string = pc.starts_with(values, '"')
    inner = pc.utf8_slice_codeunits(values, 1, -1)
    bare = pc.if_else(pc.equal(values, "null"), pa.scalar(None, pa.string()), values)
    text = pc.if_else(is_string, inner, bare)
    escaped = pc.match_substring(values, "\\")          # only a string can hold one
    if pc.any(escaped).as_py():
        decoded = parse_json_column(values.filter(escaped))
        text = pc.replace_with_mask(text, escaped, pa.array(decoded, pa.string()))
    return text, is_string


def _quoted(texts: pa.Array) -> pa.Array:
    """Texts -> JSON strings as orjson writes them (null -> ``null``): quoted as they are
    unless they hold a quote, a backslash or a control character, which orjson escapes."""
    out = pc.binary_join_element_wise('"', texts, '"', "")
    needs = pc.fill_null(pc.match_substring_regex(texts, r'["\\\x00-\x1f]'), False)
    if pc.any(needs).as_py():
        encoded = [orjson.dumps(t).decode() for t in texts.filter(needs).to_pylist()]
        out = pc.replace_with_mask(out, needs, pa.array(encoded, pa.string()))
    return pc.fill_null(out, "null")


def _text(v) -> str | None:
    t = type(v)
    if v is None or t is str:
        return v
    if t is int:
        return str(v)                     # an int's JSON text, without a call into orjson
    return orjson.dumps(v).decode()


def _texts(values: list) -> pa.Array:
    """Values as text: strings as they are, others as their JSON text; null stays null."""
    return pa.array([_text(v) for v in values], pa.string())


class Mask(_ColumnEdit):
    """``mask``: a value becomes ``stars`` asterisks (hiding its length too), or keeps its
    last ``keep_last`` characters with the others asterisked. Null stays null."""

    kind = "mask"

    def __init__(self, columns: Iterable[str], stars: int | None = None,
                 keep_last: int | None = None, char: str = "*") -> None:
        super().__init__(columns)
        self.stars, self.keep_last, self.char = stars, keep_last, char

    def new_values(self, values: list) -> list:
        return self._masked(_texts(values)).to_pylist()

    def json_values(self, values: pa.Array) -> pa.Array:
        return _quoted(self._masked(_json_texts(values)[0]))

    def _masked(self, text: pa.Array) -> pa.Array:
        if self.keep_last is None:
            fixed = self.char * (self.stars if self.stars is not None else 8)
            return pc.if_else(pc.is_null(text), pa.scalar(None, pa.string()), fixed)
        k = self.keep_last
        length = pc.utf8_length(text)
        hidden = pc.max_element_wise(pc.subtract(length, k), 0)
        head = pc.binary_repeat(pa.scalar(self.char), hidden)
        tail = pc.if_else(pc.greater(length, k), pc.utf8_slice_codeunits(text, -k) if k else "",
                          "")
        tail = pc.if_else(pc.greater(length, k), tail, pc.binary_repeat(pa.scalar(self.char),
                                                                         length))
        return pc.binary_join_element_wise(head, tail, "")


class Hash(_ColumnEdit):
    """``hash``: a value becomes the hex SHA-256 of the salt followed by its text.
    Equal values stay equal under one salt; null stays null."""

    kind = "hash"

    def __init__(self, columns: Iterable[str], salt: str = "") -> None:
        super().__init__(columns)
        self._salt = salt.encode()

    def __repr__(self) -> str:               # the salt is a secret
        return f"Hash(columns={self.pattern.patterns!r})"

    def new_values(self, values: list) -> list:
        return self._hashed(_texts(values)).to_pylist()

    def json_values(self, values: pa.Array) -> pa.Array:
        return _quoted(self._hashed(_json_texts(values)[0]))

    def _hashed(self, text: pa.Array) -> pa.Array:
        distinct = pc.unique(text)
        digests = pa.array([None if v is None else
                            hashlib.sha256(self._salt + v.encode()).hexdigest()
                            for v in distinct.to_pylist()], pa.string())
        return pc.take(digests, pc.index_in(text, value_set=distinct))


class Truncate(_ColumnEdit):
    """``truncate``: text values longer than ``length`` characters are cut to it."""

    kind = "truncate"

    def __init__(self, columns: Iterable[str], length: int) -> None:
        super().__init__(columns)
        self.length = length

    def new_values(self, values: list) -> list:
        strings = [v if isinstance(v, str) else None for v in values]
        cut = pc.utf8_slice_codeunits(pa.array(strings, pa.string()), 0, self.length).to_pylist()
        return [c if isinstance(v, str) else v for v, c in zip(values, cut)]

    def json_values(self, values: pa.Array) -> pa.Array:
        text, is_string = _json_texts(values)
        cut = _quoted(pc.utf8_slice_codeunits(text, 0, self.length))
        return pc.if_else(is_string, cut, values)


# --- reshaping images -------------------------------------------------------


class _Reshape(Transform):
    """Rewrite whole images that hold fields the ``columns`` patterns name."""

    image_columns: tuple[str, ...] = IMAGE_COLUMNS

    def __init__(self, columns: Iterable[str]) -> None:
        self.pattern = ColumnPattern(columns)

    def reshape(self, image: dict, table: str, fields: tuple[str, ...]) -> dict:
        raise NotImplementedError

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        selected = _selected(events, self.pattern)
        for column in self.image_columns if selected else ():
            if not events.has(column):
                continue
            rows, names = selected
            images = events.images(column, rows)
            touched = False
            for i, name in zip(rows.tolist(), names):
                image = images[i]
                fields = self.pattern.fields(name, image) if image else ()
                if fields:
                    images[i] = self.reshape(image, name, fields)
                    touched = True
            if touched:
                events.changed(column)
        return events


class DropColumns(_Reshape):
    """``drop_columns``: the named fields leave ``before`` and ``after`` (the key keeps its
    columns: hash a key column instead of dropping it)."""

    kind = "drop_columns"
    image_columns = ("before", "after")

    def reshape(self, image: dict, table: str, fields: tuple[str, ...]) -> dict:
        for f in fields:
            del image[f]
        return image


class Rename(_Reshape):
    """``rename``: fields get new names in every image, the key included (order kept)."""

    kind = "rename"

    def __init__(self, columns: Mapping[str, str]) -> None:
        super().__init__(columns)
        self._by_pattern = dict(columns)

    def reshape(self, image: dict, table: str, fields: tuple[str, ...]) -> dict:
        new_names = {f: self._new_name(table, f) for f in fields}
        return {new_names.get(k, k): v for k, v in image.items()}

    def _new_name(self, table: str, field: str) -> str:
        db, name = table.split(".", 1)
        for pattern, new in self._by_pattern.items():
            pdb, ptable, pcol = pattern.split(".")
            if fnmatchcase(db, pdb) and fnmatchcase(name, ptable) and fnmatchcase(field, pcol):
                return new
        return field


# --- predicates ---------------------------------------------------------------


def field_lookup(events: EventBatch, rows: np.ndarray | None = None) -> Callable[[Ref], Any]:
    """``lookup(ref)`` for the expression evaluator: an Arrow column, or the Python values
    of an image field (parsing that image column once)."""
    def lookup(ref: Ref) -> Any:
        if ref.image is None:
            if not events.has(ref.name):
                raise KeyError(f"no field {ref.name!r} in the events")
            column = events.column(ref.name)
            return column if rows is None else column.take(pa.array(rows, pa.int64()))
        return events.field_values(ref.image, ref.name, rows)
    return lookup


class Filter(Transform):
    """``filter``: keep or drop events by op, table and a predicate.

    ``tables`` and ``ops`` say which events the filter looks at (default: all); others
    pass untouched. Of those, ``keep: EXPR`` keeps the ones where EXPR is true, ``drop:
    EXPR`` drops them; with neither, the events looked at are kept and every other event
    is dropped (``filter: {tables: [shop.orders]}`` keeps only that table)."""

    kind = "filter"

    def __init__(self, tables: Iterable[str] | None = None, ops: Iterable[str] | None = None,
                 keep: str | None = None, drop: str | None = None) -> None:
        self.tables = _tables(tables)
        self.ops = tuple(ops) if ops else None
        self.keep = parse(keep) if keep else None
        self.drop = parse(drop) if drop else None

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        n = events.num_rows
        if not n:
            return events
        scoped = events.mask_of(self.tables, self.ops)
        if self.keep is None and self.drop is None:
            return events.filter(scoped)
        rows = np.flatnonzero(scoped.to_numpy(zero_copy_only=False))
        if not len(rows):
            return events
        hit = evaluate(self.keep or self.drop, field_lookup(events, rows), len(rows))
        drop = np.zeros(n, dtype=bool)
        drop[rows] = ~hit.to_numpy(zero_copy_only=False) if self.keep is not None \
            else hit.to_numpy(zero_copy_only=False)
        return events.filter(pa.array(~drop)) if drop.any() else events


# --- adding fields --------------------------------------------------------------


class Route(Transform):
    """``route``: sets the ``column`` (default ``topic``, which the Kafka sink reads with
    ``topic_column: topic``) of each event, from a ``template`` over the envelope fields
    and image fields (``"{db}.{table}"``, ``"orders.{after.region}"``) or from one
    ``field`` (``after.tenant``). Events outside ``tables`` keep what the column held (null
    when it is new)."""

    kind = "route"

    def __init__(self, template: str | None = None, field: str | None = None,
                 column: str = "topic", tables: Iterable[str] | None = None) -> None:
        self.column = column
        self.tables = _tables(tables)
        if template is not None:
            self.parts = _template_parts(template)
        else:
            tree = parse(field or "").tree
            if tree[0] != "ref":
                raise ValueError(f"route field {field!r} must name one field, such as after.tenant")
            self.parts = [("ref", tree[1])]

    def columns(self) -> dict[str, pa.DataType]:
        return {self.column: pa.string()}

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        n = events.num_rows
        if not n:
            return events
        lookup = field_lookup(events)
        pieces = []
        for kind, value in self.parts:
            if kind == "text":
                pieces.append(value)
            else:
                pieces.append(pc.fill_null(_as_text(lookup(value)), ""))
        topic = pc.binary_join_element_wise(*pieces, "") if len(pieces) > 1 \
            else _broadcast_text(pieces[0], n)
        if self.tables is not None:
            old = events.column(self.column) if events.has(self.column) \
                else pa.nulls(n, pa.string())
            topic = pc.if_else(events.mask_of(self.tables, None), topic, old)
        events.set_column(self.column, topic)
        return events


def _as_text(values: Any) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
    return _texts(values)


def _broadcast_text(piece: Any, n: int) -> pa.Array:
    return piece if isinstance(piece, pa.Array) else pa.array([piece] * n, pa.string())


def _template_parts(template: str) -> list[tuple[str, Any]]:
    """``"cdc.{db}.{after.region}"`` -> text and field parts (``{{``/``}}`` are braces)."""
    import string

    parts: list[tuple[str, Any]] = []
    for text, name, spec, conv in string.Formatter().parse(template):
        if text:
            parts.append(("text", text))
        if name is not None:
            if spec or conv:
                raise ValueError(f"template field {{{name}}}: no format spec or conversion")
            expr = parse(name)
            if expr.tree[0] != "ref":
                raise ValueError(f"template field {{{name}}} must name a field")
            parts.append(("ref", expr.tree[1]))
    if not parts:
        raise ValueError("the template is empty")
    return parts


class AddField(Transform):
    """``add_field``: a field with a constant ``value`` or the value of an ``expression``,
    added to the ``after`` image (``target: after``), to ``before`` and ``after``
    (``both``), or as a new column of the stream (``column``, typed ``type``)."""

    kind = "add_field"

    def __init__(self, name: str, value: Any = None, expression: str | None = None,
                 target: str = "after", type: str = "string",
                 tables: Iterable[str] | None = None) -> None:
        self.name, self.value, self.target = name, value, target
        self.expression: Expression | None = parse(expression) if expression else None
        self.arrow_type = ARROW_TYPES[type]
        self.tables = _tables(tables)

    def columns(self) -> dict[str, pa.DataType]:
        return {self.name: self.arrow_type} if self.target == "column" else {}

    def _values(self, events: EventBatch, rows: np.ndarray | None) -> list:
        n = events.num_rows if rows is None else len(rows)
        if self.expression is None:
            return [self.value] * n
        return evaluate_values(self.expression, field_lookup(events, rows), n)

    def apply(self, events: EventBatch, ctx: TransformContext) -> EventBatch:
        if not events.num_rows:
            return events
        if self.target == "column":
            return self._column(events)
        rows = events.rows_of(self.tables, ROW_OPS)
        if not len(rows):
            return events
        values = self._values(events, rows)
        for column in (("before", "after") if self.target == "both" else ("after",)):
            images = events.images(column, rows)
            touched = False
            for i, value in zip(rows.tolist(), values):
                if images[i] is not None:
                    images[i][self.name] = value
                    touched = True
            if touched:
                events.changed(column)
        return events

    def _column(self, events: EventBatch) -> EventBatch:
        values = pa.array(self._values(events, None), self.arrow_type)
        if self.tables is not None:
            values = pc.if_else(events.mask_of(self.tables, None), values,
                                pa.nulls(events.num_rows, self.arrow_type))
        events.set_column(self.name, values)
        return events
