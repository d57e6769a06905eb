"""Every binlog of the shared corpus decodes fully or fails with the named error
MANIFEST.md predicts; specific values are checked against its expectations."""

from __future__ import annotations

import json
import re
from collections import Counter

import pyarrow as pa
import pytest

from mysqlcdc.binlog import events as E
from mysqlcdc.binlog.file import iter_binlog_bytes
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.errors import (ChecksumMismatchError, EncryptedBinlogError, MalformedEventError,
                             TruncatedEventError, UnsupportedEventError)
from mysqlcdc.schema.model import ColumnDef, TableDef

from .conftest import CORPUS, decode, manifest_files, read_binlog

pytestmark = pytest.mark.unit

_STD = "mariadb-server-10.11-testdata/std_data/"
_SUITE = "mariadb-server-10.11-testdata/suite/binlog/std_data/"
EXPECTED_ERRORS = {
    _STD + "binlog_before_20574.bin": EncryptedBinlogError,          # START_ENCRYPTION
    _STD + "bug11747416_32228_binlog.000001": TruncatedEventError,   # WRITE_ROWS past EOF
    _STD + "corrupt-relay-bin.000624": MalformedEventError,          # QUERY with a cut body
    _STD + "mdev-39404-binlog.000001": ChecksumMismatchError,        # bad CRC on a GTID
    _SUITE + "bug32407.001": UnsupportedEventError,                  # pre-GA rows (20-22)
    _SUITE + "ver_5_1-telco.001": UnsupportedEventError,
    _SUITE + "ver_5_1_17.001": UnsupportedEventError,
    _SUITE + "invalid_row_v2_tag.001": MalformedEventError,          # bad extra-data tags
    "rust_mysql_common/binlog_truncated_event.000001": TruncatedEventError,
    "rust_mysql_common/binlog_truncated_prev_gtid_event.000001": TruncatedEventError,
    # PARTIAL_UPDATE_ROWS with a MINIMAL before image: the full after image cannot be built
    "rust_mysql_common/json.binlog.000001": UnsupportedEventError,
    # 5.2.2 "alcatel" tree renumbered the event types: type 19 there is a rows event
    "rust_mysql_common/ver_5_1-wl2325_r.001": MalformedEventError,
    "rust_mysql_common/ver_5_1-wl2325_s.001": UnsupportedEventError,
}
FILES = manifest_files()


def test_corpus_is_present_and_complete():
    assert (CORPUS / "MANIFEST.md").exists(), f"binlog corpus missing at {CORPUS}"
    assert len(FILES) == 94
    assert set(EXPECTED_ERRORS) <= set(FILES)


@pytest.mark.parametrize("rel", FILES or ["<corpus missing>"])
def test_file_decodes_or_fails_as_predicted(rel):
    assert (CORPUS / rel).exists(), f"missing corpus file {rel}"
    expected = EXPECTED_ERRORS.get(rel)
    if expected is None:
        assert decode(rel), rel
        return
    with pytest.raises(expected) as info:
        decode(rel)
    assert type(info.value) is expected
    assert info.value.pos is not None and info.value.file is not None


def _rows(rel: str, **kw) -> list[E.RowsEvent]:
    return [e for _, e in decode(rel, **kw) if isinstance(e, E.RowsEvent)]


def test_time_issue_negative_time():
    (ev,) = _rows("rust_mysql_common/time_issue.000001")
    assert ev.rows == [(None, {"@1": "-507:48:27"})]


def test_vector_floats_and_dimensionality():
    events = [e for _, e in decode("rust_mysql_common/vector.binlog")]
    dims = [e.optional_metadata.get("vector_dimensionality") for e in events
            if isinstance(e, E.TableMapEvent)]
    assert (3,) in dims and (2, 4) in dims
    assert events[11].rows == [(None, {"id": 1, "vector_column": [1.1, 2.2, 3.3]}),
                               (None, {"id": 2, "vector_column": [1.0, -1.0, 0.0]})]


def test_json_opaque_after_images():
    events = [e for _, e in decode("rust_mysql_common/json-opaque.binlog")]
    expected = {10: {"a": "base64:type15:VQ=="}, 12: {"b": "2012-03-18"},
                14: {"c": "2012-03-18 11:30:45.000000"}, 16: {"c": "87:31:46.654321"},
                18: {"d": "123.456"}, 20: {"e": "9.00"}, 22: {"e": [0, 1, True, False]},
                24: {"e": None}}
    for i, value in expected.items():
        (before, after), = events[i - 1].rows
        assert list(after.values())[0] == value, i


def test_mysql_enum_string_set():
    write, update, delete = _rows("rust_mysql_common/mysql-enum-string-set.000001")
    digits = "0123456789"
    first = write.rows[0][1]
    assert first["f1"] == digits * 10 and len(first["f2"]) == 298 and first["f2"].startswith(digits)
    assert first["f3"] == "var1" and first["f4"] == ["one", "three"] and first["f5"] == digits
    assert update.rows[0][0] == first
    after = update.rows[0][1]
    assert (after["f1"], after["f2"], after["f3"], after["f4"]) == ("field1", "field_2", "variant2", ["two", "four"])
    assert after["f5"] == first["f2"] and delete.rows == [(after, None)]


def test_mysql_type_bit():
    (ev,) = _rows("rust_mysql_common/mysql_type_bit.000001")
    assert ev.rows == [(None, {"a": 0b100, "b": "foo", "c": 0b100000})]


def test_mdev35643_compressed_payload_and_partial_json():
    events = decode(_STD + "mdev35643_mysql_80_binlog.000001")
    t1 = [r[1] for _, e in events if isinstance(e, E.RowsEvent) and e.table == "t1" for r in e.rows]
    assert t1[:4] == [{"@1": 1, "@2": 0, "@3": ""}, {"@1": 2, "@2": 0, "@3": "hulu"},
                      {"@1": 3, "@2": 0, "@3": "bulu"}, {"@1": 4, "@2": 0, "@3": "skip"}]
    assert t1[4:104] == [{"@1": 1000 + i, "@2": i, "@3": f"--{i}--" + "/" * 100 + "--"} for i in range(100)]
    assert t1[104] == {"@1": 5, "@2": 0, "@3": "after compressed"}
    (partial,) = [e for _, e in events if e.header.type_code == 39]
    (before, after), = partial.rows
    assert before["@2"] == {"a": "hulu", "b": "[zyzzy]" * 100, "c": "bulu"}
    assert after["@2"] == {"a": "hulu", "b": "oOo" * 50, "c": "bulu"}


def test_transaction_payload_inner_sequence():
    parser = BinlogParser()
    for _, raw in iter_binlog_bytes(read_binlog("rust_mysql_common/transaction_compression.000001")):
        out = parser.parse(raw)
        if raw[4] == 40:
            assert [type(e) for e in out] == [E.QueryEvent, E.TableMapEvent, E.RowsEvent, E.XidEvent]
            assert out[2].header.type_code == 30 and all(e.header.log_pos == 0 for e in out)


@pytest.mark.parametrize("rel, top_level", [
    ("mysql-binlog-connector-rust/mysql-bin.000057", 8),
    ("mysql-binlog-connector-java/mysql-bin.compressed", 5),
    ("mysql-binlog-connector-java/mysql-bin.sakila.gz", 1462),
    ("mysql-binlog-connector-rust/mysql-bin.000080", 37),
])
def test_top_level_event_counts(rel, top_level):
    assert sum(1 for _ in iter_binlog_bytes(read_binlog(rel))) == top_level
    assert decode(rel)


def test_gtid_tagged_and_previous_gtids():
    events = [e for _, e in decode("rust_mysql_common/binlog_transaction_with_GTID_TAG.000001")]
    prev = next(e for e in events if isinstance(e, E.PreviousGtidsEvent))
    assert prev.gtid_set == "55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-2"
    gtid = next(e for e in events if isinstance(e, E.GtidEvent))
    assert gtid.gtid == "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"
    assert gtid.commit_ts_us and gtid.commit_ts_us // 1_000_000 == gtid.header.timestamp
    events = [e for _, e in decode("rust_mysql_common/binlog_transaction_previous_GTID_no_tag.000001")]
    assert events[1].gtid_set == "b9b88c66-0755-11f1-9899-4a9da94c4d71:1-2"


def test_percona_gtid_and_decimal():
    events = [e for _, e in decode("rust-mysql-binlog/bin-log.000001")]
    queries = [e.query for e in events if isinstance(e, E.QueryEvent)]
    assert queries[0].startswith("CREATE TABLE foo(id BIGINT AUTO_INCREMENT PRIMARY KEY")
    gtids = [e for e in events if isinstance(e, E.GtidEvent)]
    assert gtids[1].gtid == "87cee3a4-6b31-11e7-bdfd-0d98d6698870:14918"
    assert gtids[1].header.timestamp == 1550192291
    rows = [e for e in events if isinstance(e, E.RowsEvent)]
    assert rows[0].rows[0][1]["@2"] == "0.10000"


def test_anonymous_gtid_and_aurora_padding():
    events = [e for _, e in decode("mysql-binlog-connector-java/mysql-bin.aurora-padding")]
    assert [type(e).__name__ for e in events] == [
        "FormatDescriptionEvent", "PreviousGtidsEvent", "GtidEvent", "UnknownEvent", "QueryEvent"]
    assert events[2].gtid is None and events[4].query == "BEGIN"


def test_mariadb_full_metadata_names_and_gtids():
    events = [e for _, e in decode("rust_mysql_common/mariadb-bin.000001")]
    tm = next(e for e in events if isinstance(e, E.TableMapEvent))
    assert tm.column_names == ("id", "topic", "event_type", "event", "created")
    assert tm.primary_key == (0,)
    gtids = [e for e in events if isinstance(e, E.MariadbGtidEvent)]
    assert all(not g.standalone and "-" in g.gtid for g in gtids)


def test_minimal_row_metadata_unsigned_int():
    (ev,) = _rows("rust_mysql_common/minimal_row_metadata.000001")
    assert ev.rows[0][1]["@5"] == 3230202323


def _concatenated_json(text: str) -> list[dict]:
    dec, out, pos = json.JSONDecoder(), [], 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos < len(text):
            obj, pos = dec.raw_decode(text, pos)
            out.append(obj)
    return out


@pytest.mark.parametrize("name", ["01", "02", "03", "05", "06", "07"])
def test_binlog_parser_expected_rows(name):
    expected = [o for o in _concatenated_json((CORPUS / f"binlog-parser/{name}.json").read_text())
                if o["Type"] in ("Insert", "Update", "Delete")]
    got = []
    for pos, e in decode(f"binlog-parser/mysql-bin.{name}"):
        if isinstance(e, E.RowsEvent):
            got.extend((e.schema, e.table, b, a) for b, a in e.rows)
    assert len(got) == len(expected)
    for (schema, table, before, after), want in zip(got, expected):
        assert (schema, table) == (want["Header"]["Schema"], want["Header"]["Table"])
        if want["Type"] == "Update":
            images = [(before, want["OldData"]), (after, want["NewData"])]
        else:
            images = [(after if want["Type"] == "Insert" else before, want["Data"])]
        for image, data in images:
            assert sorted(map(_plain, image.values())) == sorted(map(repr, data["Row"].values()))


def _plain(value: object) -> str:
    """Our TIMESTAMP text (UTC, ISO with Z) as binlog-parser prints it, for comparison."""
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value):
        value = value[:-1].replace("T", " ")
    return repr(value)


_VV_ROW = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]*)`\.`([^`]*)`", re.M)


@pytest.mark.parametrize("n", range(1, 9))
def test_local_mariadb_row_counts_match_mariadb_binlog(n):
    rel = f"local-mariadb-10.11/mariadb-bin.{n:06d}"
    text = (CORPUS / f"{rel}.decode-rows-vv.txt").read_text(encoding="utf-8", errors="replace")
    kinds = {"INSERT INTO": "c", "UPDATE": "u", "DELETE FROM": "d"}
    want = Counter((kinds[k], db, t) for k, db, t in _VV_ROW.findall(text))
    got = Counter((e.kind, e.schema, e.table) for e in _rows(rel) for _ in e.rows)
    assert got == want


def test_local_mariadb_t_types_values_match_generation_sql():
    first = _rows("local-mariadb-10.11/mariadb-bin.000001")[0]
    row1, row2, row3 = (after for _, after in first.rows)
    assert row1 == {
        "id": 1, "ti": -128, "tiu": 255, "si": -32768, "mi": -8388608,
        "bi": -9223372036854775808, "biu": 18446744073709551615,
        "dec1": "-12345678901234.123456", "fl": 1.5, "db": -2.25e100, "d": "2024-02-29",
        "dt": "2024-02-29 23:59:59.123456", "ts": "2024-01-01T00:00:00.125Z", "tm": "-838:59:59.99",
        "yr": 2024, "c": "abc", "vc": "héllo wörld 😀", "vl": "café", "bn": "AQIDBA==", "vb": "AP8=",
        "bl": "3q2+7w==", "tx": "some text", "en": "green", "st": ["a", "c"], "bt": 0b1010101010,
        "js": '{"k": [1, 2, {"n": null}], "s": "v"}',
        "pt": "000000000101000000000000000000f03f0000000000000040",
        "ip6": "IAENuAAAAAAAAAAAAAAAAQ==", "uu": "Ej5FZ+ibEtOkVkJmFBdAAA==", "ip4": "wKgAAQ==",
        "hidden_col": 42, "gen_v": 2, "gen_s": "xhéllo wörld 😀"}
    assert all(row2[k] is None for k in row2 if k not in ("id", "hidden_col", "gen_v"))
    assert (row3["dec1"], row3["d"], row3["dt"], row3["ts"], row3["tm"], row3["yr"]) == (
        "0.000000", "1000-01-01", "1000-01-01 00:00:00.000000", "1970-01-01T00:00:01.000Z",
        "00:00:00.00", 1901)
    assert (row3["bn"], row3["st"], row3["bt"], row3["js"]) == ("AAAAAA==", [], 0, "[]")


def test_local_mariadb_compressed_minimal_noblob_and_timezone():
    comp = _rows("local-mariadb-10.11/mariadb-bin.000002")
    assert [r[1]["payload"] for r in comp[0].rows] == ["abcdefgh" * 100, "zyxw" * 200, "short"]
    assert comp[1].rows[0][1] == {"id": 1, "payload": "abcdefgh" * 100 + "-upd", "n": 11}
    minimal = _rows("local-mariadb-10.11/mariadb-bin.000003")
    assert minimal[0].rows == [({"@1": 1}, {"@17": "minimal-image update",
                                            "@33": "xminimal-image update"})]
    noblob_after = minimal[3].rows[0][1]
    assert "@21" not in noblob_after and "@22" in noblob_after and noblob_after["@2"] == 5
    names = tuple(f"c{i}" for i in range(33))
    table = TableDef("cdc", "t_types", tuple(ColumnDef(n, "int") for n in names))
    named = _rows("local-mariadb-10.11/mariadb-bin.000003", tables=lambda db, t: table if t == "t_types" else None)
    assert named[0].rows[0][0] == {"c0": 1}
    ts = [e for e in _rows("local-mariadb-10.11/mariadb-bin.000004") if e.table == "t_ts"]
    assert ts[0].rows[0][1] == {"id": 1, "ts": "2024-06-01T06:30:00.654321Z"}


def test_include_filter_skips_row_decoding():
    rows = _rows("local-mariadb-10.11/mariadb-bin.000008", include=lambda db, t: t != "t_many")
    assert rows and all(e.rows is None for e in rows)
    rows = _rows("local-mariadb-10.11/mariadb-bin.000008")
    assert sum(len(e.rows) for e in rows if e.kind == "u") == 500


def _by_table(rel: str, include=None) -> dict:
    from mysqlcdc.capture.offline import iter_file_batches

    out: dict = {}
    for batch in iter_file_batches([str(CORPUS / rel)], include=include):
        for row in batch.to_pylist():
            out.setdefault((row["db"], row["table"]), []).append(row)
    return out


@pytest.mark.parametrize("rel", ["local-mariadb-10.11/mariadb-bin.000001",
                                 "local-mariadb-10.11/mariadb-bin.000003"])
def test_rows_of_a_filtered_table_are_passed_over_and_the_rest_is_unchanged(rel, monkeypatch):
    """A rows event of a table whose TABLE_MAP says it is filtered out is passed over from
    its bytes (``rowsdecode.EXCLUDED``), with no event built; every other table's
    changes and their transactions come out as they do without the filter."""
    from mysqlcdc.binlog import rowsdecode

    everything = _by_table(rel)
    passed = []
    real = rowsdecode._excluded

    def counted(*args):
        found = real(*args)
        passed.extend([found] if found is rowsdecode.EXCLUDED else [])
        return found

    monkeypatch.setattr(rowsdecode, "_excluded", counted)
    for dropped in everything:
        passed.clear()
        kept = _by_table(rel, include=lambda db, t, dropped=dropped: (db, t) != dropped)
        assert kept == {k: v for k, v in everything.items() if k != dropped}
        if len(everything[dropped]) > 1:
            assert passed, f"no rows event of {dropped} was passed over from its bytes"


# --- names from the DDL in the files (no server to ask, no column names in the binlog) ---

def _file_changes(rel: str) -> list[tuple[str, str, dict]]:
    from mysqlcdc.capture.offline import iter_file_batches

    out = []
    for batch in iter_file_batches([str(CORPUS / rel)]):
        for op, table, before, after in zip(*(batch.column(c).to_pylist()
                                              for c in ("op", "table", "before", "after"))):
            if op in ("c", "u", "d"):
                out.append((op, table, json.loads(after or before)))
    return out


def _batches(path, columnar: bool):
    from mysqlcdc.capture.offline import iter_file_batches

    out = []
    try:
        for batch in iter_file_batches([str(path)], columnar=columnar, batch_rows=64):
            out.append(batch)
    except Exception as e:          # noqa: BLE001 - the same error, after the same batches
        out.append((type(e).__name__, getattr(e, "pos", None), str(e)))
    return out


@pytest.mark.parametrize("rel", FILES or ["<corpus missing>"])
def test_columnar_envelopes_equal_the_reference_path(rel, tmp_path):
    """Row images converted column by column give the same envelope batches as
    decoding every image to a dict, for every file of the corpus (MySQL 8 payloads,
    MINIMAL and NOBLOB images, every type the corpus holds)."""
    path = tmp_path / "corpus.000001"        # a binlog file name, whatever the corpus calls it
    path.write_bytes((CORPUS / rel).read_bytes())
    want, got = _batches(path, False), _batches(path, True)
    assert len(got) == len(want)
    assert sum(b.num_rows for b in want if isinstance(b, pa.RecordBatch)) == sum(
        b.num_rows for b in got if isinstance(b, pa.RecordBatch))
    for a, b in zip(want, got):
        assert (a.equals(b) if isinstance(a, type(b)) and hasattr(a, "equals") else a == b), rel


def test_percona_rows_are_named_by_the_create_table_in_the_file():
    changes = _file_changes("rust-mysql-binlog/bin-log.000001")
    assert changes[0] == ("c", "foo", {"id": 1, "val_decimal": "0.10000",
                                       "comment": "zero point one"})


def test_mysql80_rows_are_named_by_the_create_table_in_the_file():
    changes = _file_changes("mariadb-server-10.11-testdata/std_data/mdev35643_mysql_80_binlog.000001")
    t1 = [row for _, table, row in changes if table == "t1"]
    assert t1[0] == {"a": 1, "b": 0, "c": ""}
    assert {"a": 1000, "b": 0, "c": "--0--" + "/" * 100 + "--"} in t1   # inside the zstd payload
    assert t1[-1] == {"a": 5, "b": 0, "c": "after compressed"}


def _capture_trace(rel: str, skim: bool) -> tuple[list, list, str | None]:
    """What capture makes of a corpus file, as ``iter_file_batches`` reads it: the
    envelope rows, the decoder's boundary and transaction state after every event,
    and the error it stops with; ``skim=False`` parses every event."""
    from mysqlcdc.capture.changes import ChangeDecoder
    from mysqlcdc.capture.offline import FileSchema

    parser = BinlogParser()
    follower = parser.tables = FileSchema(parser)
    decoder = ChangeDecoder(parser, follower, ddl=follower)
    if not skim:       # the parser vouches for no event: every one is parsed
        parser.skim, parser.skim_mariadb_gtid, parser.skim_table_map, parser.skim_rows = (
            lambda data: -1, lambda data: None, lambda data: None, lambda data: None)
    name, states, error = "corpus.000001", [], None   # a name with a number, as seq needs
    try:
        for pos, raw in iter_binlog_bytes(read_binlog(rel), name):
            decoder.feed_raw(name, pos, raw)
            t = decoder.tracker
            states.append((decoder.boundary, decoder.query, t.in_txn, t._group_open, t.ctx.gtid,
                           t.ctx.txn_id, t.ctx.ts_ms, t.ctx.server_id, dict(decoder.keys)))
    except Exception as e:                     # compared between the two runs below
        error = f"{type(e).__name__} {getattr(e, 'pos', None)} {e}"
    return decoder.take().to_pylist(), states, error


@pytest.mark.parametrize("rel", FILES or ["<corpus missing>"])
def test_skimmed_events_capture_as_parsed_ones(rel):
    """GTID, TABLE_MAP, rows, ANNOTATE_ROWS and XID events taken from their bytes on the
    hot path (``ChangeDecoder.feed_raw``) leave every row, boundary and transaction
    state, and every error, exactly as parsing them does."""
    assert _capture_trace(rel, True) == _capture_trace(rel, False)
