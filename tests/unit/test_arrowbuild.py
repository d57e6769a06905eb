"""Arrow arrays made from buffers (``mysqlcdc.arrowbuild``) equal pyarrow's own
conversions: nulls, non-ASCII text, bytes, each supported type, and the fallback."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mysqlcdc.arrowbuild import (array, bool_array, fixed_values, from_numpy, group_codes,
                                 group_values, int32_array, int64_array, record_batch, repeat,
                                 scalar, true_or_null)

pytestmark = pytest.mark.unit


def test_record_batch_equals_from_pydict():
    schema = pa.schema([("s", pa.string()), ("b", pa.binary()), ("ls", pa.large_string()),
                        ("i", pa.int64()), ("j", pa.int32()), ("f", pa.float64())])
    columns = {"s": ["a", "é€😀", None, ""], "b": [b"\x00\xff", None, b"", b"z"],
               "ls": [None, "x", "yy", None], "i": [1, None, -(2 ** 62), 0],
               "j": [None, 2, -3, 4], "f": [0.5, None, float("inf"), -1.0]}
    got = record_batch(columns, schema)
    assert got.equals(pa.RecordBatch.from_pydict(columns, schema=schema))
    assert got.column("s").null_count == 1
    empty = record_batch({n: [] for n in schema.names}, schema)
    assert empty.num_rows == 0 and empty.schema == schema


def test_record_batch_refuses_bad_utf8_and_falls_back_for_other_types():
    with pytest.raises(pa.ArrowInvalid):
        record_batch({"s": [b"\xff\xfe"]}, pa.schema([("s", pa.string())]))
    schema = pa.schema([("t", pa.bool_())])
    assert record_batch({"t": [True, None]}, schema).column("t").to_pylist() == [True, None]


def test_group_codes_number_every_combination_and_read_back():
    db = pa.array(["a", "b", None, "a", "b"])
    op = pa.array(["c", "c", "d", "d", "c"]).slice(0)
    codes, names = group_codes([db.slice(1), op.slice(1)])
    assert [group_values(int(c), names) for c in codes] == [("b", "c"), (None, "d"), ("a", "d"),
                                                           ("b", "c")]
    assert codes[0] == codes[3] and len(set(codes.tolist())) == 3


def test_true_or_null_and_int64_array():
    mask = pc.not_equal(pa.array([1, 2, None, 4, 4, 5, 6, 7, 8, 9]), pa.array([1] * 10)).slice(1)
    assert true_or_null(mask).tolist() == [True, True, True, True, True, True, True, True, True]
    mask = pa.array([True, False, None, False, True, False, False, False, False, True]).slice(2)
    assert true_or_null(mask).tolist() == [True, False, True, False, False, False, False, True]
    assert int64_array(np.array([3, 1, 2], np.int32)).to_pylist() == [3, 1, 2]


@pytest.mark.parametrize("text", ["", "null", '"', "é-ü ✓", "}\n"])
def test_a_text_scalar_is_the_string_scalar_pyarrow_makes(text):
    from mysqlcdc.arrowbuild import text_scalar

    made = text_scalar(text)
    assert made.type == pa.string() and made.is_valid
    assert made.equals(pa.scalar(text, pa.string())) and made.as_py() == text


@pytest.mark.parametrize("values, type_", [
    (["c", "u", "d", "c"], pa.string()),                  # ASCII: lengths and one encode
    (["é€", None, "", "😀x"], pa.string()),               # non-ASCII with a null
    (("ab", None, "cd"), pa.large_string()),
    ([b"\x00\xff", None, b""], pa.binary()),
    (["text", b"bytes"], pa.binary()),
    ([None, None], pa.string()),
    ([1, None, -(2 ** 63)], pa.int64()),
    ((2 ** 31 - 1, 0), pa.int32()),
    ([0.5, None], pa.float64()),
    ([], pa.string()),
])
def test_array_equals_pyarrows_conversion(values, type_):
    got = array(values, type_)
    got.validate(full=True)
    assert got.equals(pa.array(list(values), type_))


def test_array_refuses_what_pyarrow_refuses():
    with pytest.raises(pa.ArrowInvalid):
        array([b"\xff"], pa.string())
    with pytest.raises(UnicodeEncodeError):
        array(["\ud800"], pa.string())


@pytest.mark.parametrize("value, type_", [
    (None, pa.binary()), ("é", pa.string()), (b'Z"', pa.binary()), (True, pa.bool_()),
    (False, pa.bool_()), (-7, pa.int64()), (3, pa.int32()), (2.5, pa.float64()),
    (10 ** 35 + 7, pa.decimal128(36, 0)), (-(10 ** 37), pa.decimal128(38, 0)),
])
def test_scalar_and_repeat_equal_pyarrows(value, type_):
    assert scalar(value, type_).equals(pa.scalar(value, type_))
    assert repeat(value, type_, 3).equals(pa.array([value] * 3, type_))


def test_numpy_arrays_both_ways():
    index = np.array([3, -1, 5, -1], np.int64)
    got = from_numpy(index, mask=index < 0)
    assert got.equals(pa.array(index, mask=index < 0)) and got.null_count == 2
    for values in (np.arange(5, dtype=np.uint64), np.arange(4, dtype=np.int8)[::2],
                   np.array([True, False, True])):
        assert from_numpy(values).equals(pa.array(values))
    assert from_numpy(np.arange(3, dtype=">i4")).equals(pa.array([0, 1, 2], pa.int32()))
    assert bool_array(np.array([False, True] * 5)).equals(pa.array([False, True] * 5))
    assert int32_array(np.arange(3)).equals(pa.array([0, 1, 2], pa.int32()))
    doubles = pa.array([0.0, 1.5, -2.0, 4.25])[1:]
    assert fixed_values(doubles).tolist() == [1.5, -2.0, 4.25]
