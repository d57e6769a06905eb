"""Arrow arrays made and read through their buffers, for a process that only moves
record batches along.

pyarrow's own conversions (``pa.array``, ``RecordBatch.from_pydict``, ``to_numpy``, a
Python value compared with an array) ask, the first time one runs in a process, whether
the values are a pandas object, and import pandas to know; a table's ``group_by`` imports
pyarrow's query engine. Together that is a few tenths of a CPU second in a read task
that moves a decode-ahead spool into changelog files or Kafka messages, which needs
neither: its counts, partitions and summary rows are made here, with numpy over Arrow's
buffers, and the texts it gives compute functions are scalars made here
(:func:`text_scalar`).
"""

from __future__ import annotations

from array import array
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["group_codes", "group_values", "int64_array", "record_batch", "text_scalar",
           "true_or_null"]

_OFFSETS = {pa.string(): "i", pa.binary(): "i", pa.large_string(): "q", pa.large_binary(): "q"}
_FIXED = {pa.int64(): "q", pa.int32(): "i", pa.float64(): "d"}


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
    offsets = array("i", [0, len(data)])
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)])[0]


def _array(values: list, type_: pa.DataType) -> pa.Array:
    n = len(values)
    nulls = sum(v is None for v in values)
    validity = _validity(values) if nulls else None
    code = _FIXED.get(type_)
    if code is not None:
        data = array(code, (0 if v is None else v for v in values))
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(data)], null_count=nulls)
    texts = [b"" if v is None else v.encode() if isinstance(v, str) else bytes(v) for v in values]
    offsets = array(_OFFSETS[type_], [0])
    end = 0
    for t in texts:
        end += len(t)
        offsets.append(end)
    out = pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets),
                                           pa.py_buffer(b"".join(texts))], null_count=nulls)
    if type_ == pa.string() or type_ == pa.large_string():
        out.validate(full=True)            # UTF-8, as pyarrow's conversion checks it
    return out


def _validity(values: list) -> pa.Buffer:
    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(bits))


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
