"""Bounded fuzzing: mutated corpus binlogs raise only DecodeError subclasses."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mysqlcdc.binlog.file import iter_binlog_bytes
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.errors import DecodeError
from tests.corpus.conftest import CORPUS, manifest_files, read_binlog

pytestmark = [pytest.mark.unit, pytest.mark.timeout(180)]

_SMALL = sorted(f for f in manifest_files() if (CORPUS / f).stat().st_size < 30_000)
_SETTINGS = settings(max_examples=1500, deadline=2000, derandomize=True, database=None,
                     suppress_health_check=list(HealthCheck))


def _decode_all(data: bytes, verify: bool) -> None:
    parser = BinlogParser(verify_checksum=verify, file="fuzz.000001")
    try:
        for pos, raw in iter_binlog_bytes(data, "fuzz.000001"):
            parser.parse(raw, pos)
    except DecodeError:
        pass


def test_corpus_has_small_files():
    assert len(_SMALL) > 50


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(read_binlog(draw(st.sampled_from(_SMALL))))
    kind = draw(st.sampled_from(["flip", "truncate", "splice", "bytes"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(4, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[draw(st.integers(4, len(data))):]
    elif kind == "splice":
        other = read_binlog(draw(st.sampled_from(_SMALL)))
        cut, start = draw(st.integers(4, len(data))), draw(st.integers(4, len(other)))
        data = data[:cut] + bytearray(other[start:start + draw(st.integers(0, 4000))])
    else:
        i = draw(st.integers(4, len(data) - 1))
        data[i:i + 8] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@_SETTINGS
@given(mutated())
def test_mutations_raise_only_decode_errors(data):
    _decode_all(data, verify=True)


@_SETTINGS
@given(mutated())
def test_mutations_past_the_checksum_raise_only_decode_errors(data):
    _decode_all(data, verify=False)
