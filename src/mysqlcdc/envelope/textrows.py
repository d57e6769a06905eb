"""Server-formatted values (a text result set) -> envelope JSON texts, a column at a time.

A snapshot selects every column as text the server formats (``capture.snapshot``
chooses the expression per type) and receives it as Arrow binary arrays
(``protocol.resultset``). Each column then has a *kind* saying how its text becomes
the JSON fragment the binlog decoder writes for the same value (docs/ENVELOPE.md):

``number``  the text is the JSON number (integers, BIT and YEAR cast to numbers);
``double``  a DOUBLE in the server's shortest round-trip text: parsed, written as
            orjson writes the double;
``float``   a FLOAT widened to DOUBLE: parsed, narrowed back to its 32 bits, written
            as the shortest decimal that round-trips them (``binlog.values.float32``);
``string``  UTF-8 text, quoted, ``"`` and ``\\`` escaped (a value with a control
            character is written by orjson alone);
``quoted``  ASCII text that only needs quotes (DECIMAL, temporal, hex, base64);
``timestamp`` a TIMESTAMP as the server shows it in UTC (``2024-02-29 13:45:07.123``),
            written ``"2024-02-29T13:45:07.123Z"`` (a zero one as it is);
``set``     comma-separated SET labels, written as a JSON array;
``json``    JSON text (a MySQL JSON column), parsed and written compact.

Fragments are joined into ``{"name":fragment,...}`` texts by Arrow (``null`` for SQL
NULL). ``tests/integration/test_snapshot_chunks.py`` holds the result to the binlog
decoder's images of the same rows, type by type.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.arrowbuild import array, bool_array, fixed_values, scalar, true_or_null
from mysqlcdc.binlog.values.float32 import float32_text
from mysqlcdc.envelope.builder import _encode
from mysqlcdc.envelope.columnar import _float_kernel, _join, _list_texts, _scalar, make_context

__all__ = ["KINDS", "fragments", "object_texts"]

KINDS = ("number", "double", "float", "string", "quoted", "timestamp", "set", "json")
_F32 = struct.Struct("<f")


def fragments(values: pa.Array, kind: str) -> pa.Array:
    """The JSON fragment of every value of one column (null where the value is NULL)."""
    if kind == "number":
        return values
    if kind == "quoted":
        return _quoted(values)
    if kind == "timestamp":
        return _timestamps(values)
    if kind == "string":
        return _strings(values)
    if kind == "double":
        return _doubles(values)
    if kind == "float":
        return _floats(values)
    if kind == "set":
        return _sets(values)
    if kind == "json":
        return _per_value(values, lambda text: orjson.dumps(json.loads(text)))
    raise ValueError(f"unknown value kind {kind!r}")


def object_texts(names: list[str], frags: list[pa.Array]) -> pa.Array:
    """``{"name":fragment,...}`` per row, as a string array."""
    parts: list = []
    for i, (name, frag) in enumerate(zip(names, frags)):
        parts += [_scalar(("{" if i == 0 else ",").encode() + orjson.dumps(name) + b":"), frag]
    parts.append(_scalar(b"}"))
    joined = pc.binary_join_element_wise(*parts, _scalar(b""), null_handling="replace",
                                         null_replacement="null")
    return joined.cast(pa.string())


def _quoted(values: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(_scalar(b'"'), values, _scalar(b'"'), _scalar(b""))


def _timestamps(values: pa.Array) -> pa.Array:
    utc = pc.binary_join_element_wise(
        _scalar(b'"'), pc.replace_substring(values, b" ", b"T", max_replacements=1),
        _scalar(b'Z"'), _scalar(b""))
    zero = pc.starts_with(values.cast(pa.string()), "0000-00-00")
    return pc.if_else(_false_for_null(zero), _quoted(values), utc)


def _strings(values: pa.Array) -> pa.Array:
    """Quoted and escaped; values orjson would escape otherwise (control characters)
    or that are not UTF-8 are written by the reference encoder."""
    try:
        text = values.cast(pa.string())                  # checks the UTF-8
    except pa.ArrowInvalid:
        return _per_value(values, lambda raw: _encode(raw.decode("utf-8", "backslashreplace")))
    if not pc.any(pc.match_substring_regex(text, '["\\\\\\x00-\\x1f]')).as_py():
        return _quoted(values)                  # nothing to escape: the common case
    escaped = pc.replace_substring(values, b"\\", b"\\\\")
    escaped = pc.replace_substring(escaped, b'"', b'\\"')
    out = _quoted(escaped)
    control = pc.match_substring_regex(text, "[\\x00-\\x1f]")
    if pc.any(control).as_py():
        out = _patch(out, values, _false_for_null(control),
                     lambda raw: orjson.dumps(raw.decode("utf-8")))
    return out


def _doubles(values: pa.Array) -> pa.Array:
    numbers = pc.cast(values.cast(pa.string()), pa.float64())
    texts = _list_texts(_numbers(numbers))
    return _nulls_of(values, texts)


def _floats(values: pa.Array) -> pa.Array:
    """A FLOAT's exact value arrives widened to a double: its 32 bits are recovered by
    rounding to binary32 (exact: the double is that binary32 value)."""
    wide = _numbers(pc.cast(values.cast(pa.string()), pa.float64()))
    with np.errstate(all="ignore"):
        narrow = wide.astype(np.float32)
    m = len(narrow)
    ctx = make_context([narrow.tobytes()])
    off = np.arange(m, dtype=np.int64) * 4
    texts, redo = _float_kernel(ctx, off, None, None, np.zeros(m, bool))
    texts = _nulls_of(values, texts)
    if redo is not None and values.null_count:
        redo = redo & ~true_or_null(values.is_null())
    if redo is not None and redo.any():
        raw = narrow.tobytes()
        mask = bool_array(redo)
        texts = _patch(texts, array([raw[i * 4:i * 4 + 4] for i in range(m)], pa.binary()),
                       mask, lambda b: orjson.dumps(float32_text(b)))
    return texts


def _sets(values: pa.Array) -> pa.Array:
    """``a,b`` -> ``["a","b"]``; the empty set ``[]``. Labels hold no comma."""
    escaped = pc.replace_substring(values, b"\\", b"\\\\")
    escaped = pc.replace_substring(escaped, b'"', b'\\"')
    listed = pc.replace_substring(escaped, b",", b'","')
    out = pc.binary_join_element_wise(_scalar(b'["'), listed, _scalar(b'"]'), _scalar(b""))
    empty = pc.equal(pc.binary_length(values), scalar(0, pa.int32()))
    return pc.if_else(empty, _scalar(b"[]"), out)


def _nulls_of(values: pa.Array, texts: pa.Array) -> pa.Array:
    """``texts`` null where ``values`` is null."""
    if not values.null_count:
        return texts
    return pc.if_else(pc.is_null(values), scalar(None, pa.binary()), texts)


def _per_value(values: pa.Array, encode) -> pa.Array:
    return array([None if v is None else encode(v) for v in values.to_pylist()], pa.binary())


def _numbers(doubles: pa.Array) -> np.ndarray:
    """A float64 array's values as numpy's, a null as 0."""
    if doubles.null_count:
        doubles = doubles.fill_null(scalar(0.0, pa.float64()))
    return fixed_values(doubles)


def _false_for_null(mask: pa.Array) -> pa.Array:
    """A boolean array with its nulls made false."""
    return pc.and_kleene(mask, pc.is_valid(mask)) if mask.null_count else mask


def _patch(out: pa.Array, values: pa.Array, mask: pa.Array, encode) -> pa.Array:
    """``out`` with the rows of ``mask`` replaced by ``encode`` of their value."""
    picked = pc.filter(values, mask).to_pylist()
    replacement = array([None if v is None else encode(v) for v in picked], pa.binary())
    return pc.replace_with_mask(out, mask, replacement)
