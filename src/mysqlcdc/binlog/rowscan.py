"""Row images located, not decoded: the first half of columnar decoding.

A reader that turns row changes into columns (the envelope builder) does not
need one Python object per value: it needs to know where every value of every
row image starts. ``compile_rows_scanner`` writes, for one (columns, image
bitmaps, event kind), a function that walks a rows event's images as
``rows.compile_rows_decoder`` does, reading only the null bitmaps and the length
prefixes of variable-size values, and records per image

    ``start, e_1, ..., e_k``

``start`` where the image's null bitmap begins and ``e_j`` where the ``j``-th
variable-size column of the image (NULL or not) ends. Every other position
follows from those and the null bitmap (``envelope.columnar`` works them out for
a whole batch at once). Values are checked when they are converted; this pass
checks only that the images fill the event exactly (the caller compares the
returned position with the end of the rows data, as for the decoder).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import count
from typing import Callable

from . import constants as C
from .columns import ColumnSpec
from .rows import (_Gen, _layout_field, _length_prefix, _nullmap_code, bitmap_dispatch,
                   compile_generated, compile_rows_decoder, per_bitmap)
from .values.json_diff import JSON_DIFF_TYPE

__all__ = ["RawRows", "column_extent", "columnar_capable", "compile_rows_scanner"]

# values whose Python objects can be anything JSON holds: the envelope writes their
# image with the reference decoder (see ``columnar_capable``)
_NOT_COLUMNAR = frozenset({C.MYSQL_TYPE_JSON, JSON_DIFF_TYPE})
_CACHE: OrderedDict[tuple, Callable | None] = OrderedDict()
_MISSING = object()
_CACHE_SIZE = 4096
_LAYOUTS_PER_IMAGE = 256
_SHAPES = count()      # a number per compiled scanner: ``RawRows.shape``


class RawRows:
    """The row images of one rows event, located by a scanner (see the module doc).

    ``before``/``after`` are the present-column tuples of the before and after
    images (None when the event kind has no such image); ``recs_before`` and
    ``recs_after`` hold ``1 + variable columns`` positions per image, relative to
    ``data``. ``shape`` is a number of the scanner's own: rows with the same one
    have the same columns, kind and present columns (a cheap key for all of those).
    """

    __slots__ = ("data", "cols", "kind", "before", "after", "recs_before", "recs_after", "n",
                 "start", "end", "shape")

    def __init__(self, data: bytes, cols: tuple[ColumnSpec, ...], kind: str,
                 before: tuple[int, ...] | None, after: tuple[int, ...] | None,
                 recs_before: list[int], recs_after: list[int], n: int, start: int, end: int,
                 shape: int) -> None:
        self.data, self.cols, self.kind, self.before, self.after = data, cols, kind, before, after
        self.recs_before, self.recs_after, self.n = recs_before, recs_after, n
        self.start, self.end, self.shape = start, end, shape

    def __len__(self) -> int:
        return self.n

    def decode(self) -> list[tuple[dict | None, dict | None]]:
        """The rows as the reference decoder makes them: ``(before, after)`` dicts."""
        present = self.before if self.kind != "c" else self.after
        rows, _ = compile_rows_decoder(self.cols, self.kind, present,
                                       self.after if self.kind == "u" else None)(
            self.data, self.start, self.end)
        return rows


def column_extent(col: ColumnSpec) -> tuple[int, int]:
    """(fixed size, 0) of a fixed-size value, (0, prefix bytes) of a length-prefixed one."""
    field = _layout_field(_Gen(), col)
    return (0, field.size) if field.body is not None else (field.size, 0)


def columnar_capable(cols: tuple[ColumnSpec, ...], present: tuple[int, ...] | None) -> bool:
    """Whether an image of these columns can be scanned and converted column by column.
    JSON values are whole documents of any shape: their images take the reference path."""
    if present is None:
        return True
    for i in present:
        if cols[i].type in _NOT_COLUMNAR:
            return False
        try:
            column_extent(cols[i])
        except (NotImplementedError, ValueError):
            return False
    return True


def _image_scan_code(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], nb: int | None,
                     ind: int, out: str) -> None:
    """Code advancing ``pos`` over one image's values (after its null bitmap) and
    appending its record to list ``out``; ``start`` is where the image began. With
    ``nb`` the layout of that null bitmap is inlined; None tests ``nb`` per column."""
    ends: list[str] = []
    skip = 0

    def flush() -> None:
        nonlocal skip
        if skip:
            g.emit(ind, f"pos += {skip}")
        skip = 0

    for j, ci in enumerate(present):
        fixed, prefix = column_extent(cols[ci])
        if nb is None:
            g.emit(ind, f"if not nb & {1 << j}:")
            if prefix:
                _length_prefix(g, ind + 1, prefix)
                g.emit(ind + 1, "pos += n")
            elif fixed:
                g.emit(ind + 1, f"pos += {fixed}")
            else:
                g.emit(ind + 1, "pass")
            if prefix:
                g.emit(ind, f"e{j} = pos")
                ends.append(f"e{j}")
            continue
        if prefix:
            if not nb >> j & 1:
                flush()
                _length_prefix(g, ind, prefix)
                g.emit(ind, "pos += n")
            else:
                flush()
            g.emit(ind, f"e{j} = pos")
            ends.append(f"e{j}")
        elif not nb >> j & 1:
            skip += fixed
    flush()
    if ends:
        g.emit(ind, f"{out}.extend((start, {', '.join(ends)}))")
    else:
        g.emit(ind, f"{out}.append(start)")


def _scan_image(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], ind: int, out: str) -> None:
    """One image: the layout without NULLs inline, the others through ``rows.per_bitmap``."""
    g.emit(ind, "start = pos")
    if not present:                          # an image of no columns: no bitmap, no bytes
        g.emit(ind, f"{out}.append(start)")
        return
    _nullmap_code(g, present, ind, mask=True)
    g.emit(ind, "if nb == 0:")
    _image_scan_code(g, cols, present, 0, ind + 1, out)
    functions, make = per_bitmap(
        "data, pos, start, out, nb", lambda g2, nb: _image_scan_code(g2, cols, present, nb, 1, "out"),
        "pos", _LAYOUTS_PER_IMAGE, "row image scanner")
    bitmap_dispatch(g, ind, functions, make, f"pos = f(data, pos, start, {out}, nb)")


def compile_rows_scanner(
    cols: tuple[ColumnSpec, ...], kind: str, present: tuple[int, ...],
    present_after: tuple[int, ...] | None = None,
) -> Callable[[bytes, int, int], tuple[RawRows, int]] | None:
    """``scan(data, pos, end) -> (RawRows, pos)`` for rows events of ``kind`` ('c', 'u',
    'd') over these columns, None when their images are not converted column by column
    (``columnar_capable``); the caller checks that ``pos`` is the end of the rows data."""
    key = (cols, kind, present, present_after)
    fn = _CACHE.get(key, _MISSING)
    if fn is not _MISSING:
        _CACHE.move_to_end(key)
        return fn
    if not (columnar_capable(cols, present) and columnar_capable(cols, present_after)):
        fn = None
    else:
        fn = _scanner(cols, kind, present, present_after)
    _CACHE[key] = fn
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return fn


def _scanner(cols: tuple[ColumnSpec, ...], kind: str, present: tuple[int, ...],
             present_after: tuple[int, ...] | None) -> Callable:
    before = present if kind != "c" else None
    after = (present_after or present) if kind == "u" else present if kind == "c" else None
    g = _Gen()
    raw = g.const("RR", RawRows)
    g.emit(0, "def scan_rows(data, pos, end):", "    first = pos", "    A = []", "    B = []", "    rows = 0",
           "    while pos < end:")
    if kind == "u":
        _scan_image(g, cols, present, 2, "A")
        _scan_image(g, cols, present_after or present, 2, "B")
    else:
        _scan_image(g, cols, present, 2, "A" if kind == "d" else "B")
    g.emit(2, "rows += 1")
    g.emit(1, f"return {raw}(data, COLS, {kind!r}, {before!r}, {after!r}, A, B, rows, first, pos, "
              f"{next(_SHAPES)}), pos")
    g.env["COLS"] = cols
    return compile_generated(g, "scan_rows", "<rows scanner>")
