"""Arrow arrays made and read through their buffers, for a process that only moves
record batches along.

pyarrow's own conversions (``pa.array``, ``RecordBatch.from_pydict``, ``to_numpy``, a
Python value compared with an array) ask, the first time one runs in a process, whether
the values are a pandas object, and import pandas to know; a table's ``group_by`` imports
pyarrow's query engine. Together that is a few tenths of a CPU second in a read task
that moves a decode-ahead spool into changelog files or Kafka messages, or reads a
snapshot chunk, which needs neither: its counts, partitions and summary rows are made
here, with numpy over Arrow's buffers, the texts and numbers it gives compute functions
are scalars made here (:func:`text_scalar`, :func:`scalar`), and its arrays of Python or
numpy values too (:func:`array`, :func:`from_numpy`, :func:`repeat`).
"""

from __future__ import annotations

from array import array as array_
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["array", "bool_array", "fixed_values", "from_numpy", "group_codes", "group_values",
           "int32_array", "int64_array", "record_batch", "repeat", "scalar", "text_scalar",
           "true_or_null"]

_OFFSETS = {pa.string(): "i", pa.binary(): "i", pa.large_string(): "q", pa.large_binary(): "q"}
_FIXED = {pa.int64(): "q", pa.int32(): "i", pa.float64(): "d"}
_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
          pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
          pa.uint64(): np.uint64, pa.float32(): np.float32, pa.float64(): np.float64}
_ARROW = {np.dtype(v): k for k, v in _NUMPY.items()}


def record_batch(columns: dict[str, Sequence[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """``RecordBatch.from_pydict(columns, schema=schema)``, built from buffers where every
    field's type is a string, binary, int32, int64 or float64 one."""
    if not all(f.type in _OFFSETS or f.type in _FIXED for f in schema):
        return pa.RecordBatch.from_pydict(columns, schema=schema)
    return pa.RecordBatch.from_arrays([_array(list(columns[f.name]), f.type) for f in schema],
                                      schema=schema)


@lru_cache(maxsize=1024)
def text_scalar(text: str) -> pa.Scalar:
    """``pa.scalar(text, pa.string())``, made from buffers: a Python string given to a
    compute function (``pc.equal(column, "s")``, ``fill_null(column, "null")``) is
    converted by pyarrow, which imports pandas at its first conversion (module doc)."""
    data = text.encode("utf-8")
    offsets = array_("i", [0, len(data)])
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)])[0]


def array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """``pa.array(values, type_)`` for a (large) string or binary, int32, int64 or float64 type,
    built from buffers (``None`` is a null)."""
    return _array(values if isinstance(values, (list, tuple)) else list(values), type_)


def scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type_)`` made from buffers, for a null of any type, a string or
    binary, a boolean, an integer, a float64 or a decimal128."""
    if value is None:
        return pa.nulls(1, type_)[0]
    if type_ == pa.string():
        return text_scalar(value)
    if type_ == pa.binary():
        data = bytes(value)
        offsets = array_("i", [0, len(data)])
        return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(data)])[0]
    if type_ == pa.bool_():
        return bool_array(np.array([bool(value)]))[0]
    if pa.types.is_decimal128(type_):
        data = int(value).to_bytes(16, "little", signed=True)
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(data)])[0]
    if type_ in _NUMPY:
        data = np.array([value], _NUMPY[type_])
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(data)])[0]
    raise TypeError(f"no buffer-built scalar of type {type_}")


def repeat(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """``n`` times the same value, as ``pa.repeat`` of :func:`scalar`."""
    return pa.repeat(scalar(value, type_), n)


def bool_array(values: np.ndarray) -> pa.Array:
    """A numpy boolean array as an Arrow boolean array without nulls."""
    values = np.asarray(values, bool)
    data = np.packbits(values, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(data)])


def fixed_values(values: pa.Array) -> np.ndarray:
    """The values of an integer or floating Arrow array as numpy's (over its memory),
    what ``to_numpy`` gives, with a null's slot holding whatever its buffer holds:
    fill the nulls first where that matters."""
    dtype = np.dtype(_NUMPY[values.type])
    return np.frombuffer(values.buffers()[1], dtype, len(values), values.offset * dtype.itemsize)


def _array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    n = len(values)
    nulls = values.count(None)
    if nulls == n:
        return pa.nulls(n, type_)
    validity = None
    code = _FIXED.get(type_)
    if nulls:
        validity = _validity(values)
        filler = 0 if code is not None else ""
        values = [filler if v is None else v for v in values]
    if code is not None:
        data = array_(code, values)
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(data)], null_count=nulls)
    wide = type_ in (pa.large_string(), pa.large_binary())
    try:
        joined = "".join(values)                   # every value a str
    except TypeError:
        joined = None
    if joined is not None and joined.isascii():
        # one byte a character: the offsets are the lengths' running sum, the data one
        # encode, and ASCII is valid UTF-8
        data = joined.encode("ascii")
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, values), np.int64, n), out=offsets[1:])
        if not wide and len(data) >= 2**31:
            raise ValueError(f"{len(data)} bytes of text do not fit a {type_} array")
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(
            offsets if wide else offsets.astype(np.int32)), pa.py_buffer(data)], null_count=nulls)
    texts = [v.encode() if isinstance(v, str) else bytes(v) for v in values]
    offsets = array_(_OFFSETS[type_], [0])
    end = 0
    for t in texts:
        end += len(t)
        offsets.append(end)
    out = pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets),
                                           pa.py_buffer(b"".join(texts))], null_count=nulls)
    if type_ == pa.string() or type_ == pa.large_string():
        out.validate(full=True)            # UTF-8, as pyarrow's conversion checks it
    return out


def _validity(values: Sequence[Any]) -> pa.Buffer:
    valid = np.fromiter((v is not None for v in values), np.bool_, len(values))
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def group_codes(columns: list[pa.Array]) -> tuple[np.ndarray, list[list]]:
    """Each row's group: a number that mixes the columns' dictionary codes (the last
    column's varying fastest; :func:`group_values` turns it back), and each column's
    values by code (``None`` for a null)."""
    codes = np.zeros(len(columns[0]), np.int64)
    names: list[list] = []
    for column in columns:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        indices = encoded.indices
        width = indices.type.bit_width // 8
        index = np.frombuffer(indices.buffers()[1], f"<i{width}", len(indices),
                              indices.offset * width)
        values = encoded.dictionary.to_pylist()
        codes = codes * len(values) + index
        names.append(values)
    return codes, names


def group_values(code: int, names: list[list]) -> tuple:
    """The columns' values of the group numbered ``code`` by :func:`group_codes`."""
    out = []
    for values in reversed(names):
        code, i = divmod(code, len(values))
        out.append(values[i])
    return tuple(reversed(out))


def true_or_null(mask: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy booleans, a null as True."""
    n, offset = len(mask), mask.offset
    validity, data = mask.buffers()
    out = np.unpackbits(np.frombuffer(data, np.uint8), count=offset + n,
                        bitorder="little")[offset:].astype(bool)
    if validity is not None and mask.null_count:
        out |= ~np.unpackbits(np.frombuffer(validity, np.uint8), count=offset + n,
                              bitorder="little")[offset:].astype(bool)
    return out


def int64_array(values: np.ndarray) -> pa.Array:
    """A numpy array of integers as an Arrow int64 array (over its memory when it is one
    of contiguous int64 already)."""
    data = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def from_numpy(values: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, mask=mask)`` of a one-dimensional numpy array of numbers or
    booleans (null where ``mask`` is true), made over its memory where it is contiguous."""
    if values.dtype == np.bool_:
        out = bool_array(values)
    else:
        native = values.dtype.newbyteorder("=")
        data = np.ascontiguousarray(values, native)
        out = pa.Array.from_buffers(_ARROW[native], len(data), [None, pa.py_buffer(data)])
    if mask is None or not mask.any():
        return out
    valid = pa.py_buffer(np.packbits(~np.asarray(mask, bool), bitorder="little"))
    return pa.Array.from_buffers(out.type, len(out), [valid, out.buffers()[1]],
                                 null_count=int(np.count_nonzero(mask)))


def int32_array(values: np.ndarray) -> pa.Array:
    """A numpy array of integers as an Arrow int32 array."""
    data = np.ascontiguousarray(values, np.int32)
    return pa.Array.from_buffers(pa.int32(), len(data), [None, pa.py_buffer(data)])
