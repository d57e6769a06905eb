"""`mysqlcdc decode FILE`: one JSON line per event, named errors on bad files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CORPUS = Path(os.environ.get("MYSQLCDC_CORPUS",
                             Path(__file__).resolve().parents[3].parent / "shared/corpus/binlogs"))


def _decode(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "decode", *map(str, files)],
                          capture_output=True, text=True, timeout=120)


def test_decode_prints_every_event_as_json():
    res = _decode(CORPUS / "rust_mysql_common/time_issue.000001")
    assert res.returncode == 0, res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    assert [e["event"] for e in events][:2] == ["FormatDescriptionEvent", "PreviousGtidsEvent"]
    rows = [e for e in events if e["event"] == "RowsEvent"]
    assert len(rows) == 1 and "-507:48:27" in json.dumps(rows[0]["rows"])
    assert all(e["file"] == "time_issue.000001" and e["pos"] >= 4 for e in events)


def test_decode_names_the_error_of_a_truncated_file():
    res = _decode(CORPUS / "rust_mysql_common/binlog_truncated_event.000001")
    assert res.returncode == 2
    assert "EVENT_TRUNCATED" in res.stderr and "hint:" in res.stderr


LOCAL = CORPUS / "local-mariadb-10.11"
FILES = [LOCAL / f"mariadb-bin.00000{i}" for i in range(1, 5)]


def _run(*args: str) -> list[dict]:
    res = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "decode", *args],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_changes_are_the_envelope_the_pipeline_writes():
    from mysqlcdc.capture.offline import iter_file_batches
    from mysqlcdc.envelope.model import ARROW_SCHEMA

    rows = _run("--changes", *map(str, FILES))
    expected = [r for b in iter_file_batches(map(str, FILES)) for r in b.to_pylist()]
    assert len(rows) == len(expected) > 30
    assert list(rows[0]) == ARROW_SCHEMA.names                  # envelope order
    for got, want in zip(rows, expected):
        assert got["seq"] == str(want["seq"]) and got["op"] == want["op"]
        for text in ("before", "after", "key"):                   # JSON, embedded as is
            assert got[text] == (None if want[text] is None else json.loads(want[text]))
        assert (got["db"], got["table"], got["file"], got["pos"], got["gtid"]) == \
            (want["db"], want["table"], want["file"], want["pos"], want["gtid"])


def test_table_and_positions_bound_the_output_like_mysqlbinlog():
    every = _run("--changes", *map(str, FILES))
    only = _run("--changes", "--table", "cdc.t_nopk", *map(str, FILES))
    assert only == [r for r in every if r["table"] == "t_nopk"] and only
    first, last = FILES[0].name, FILES[-1].name
    in_first = sorted({r["pos"] for r in every if r["file"] == first})
    in_last = sorted({r["pos"] for r in every if r["file"] == last})
    start, stop = in_first[len(in_first) // 2], in_last[len(in_last) // 2]
    bounded = _run("--changes", "--start-position", str(start), "--stop-position", str(stop),
                   *map(str, FILES))
    assert bounded == [r for r in every
                       if not (r["file"] == first and r["pos"] < start)
                       and not (r["file"] == last and r["pos"] >= stop)]
    events = _run("--start-position", str(start), "--table", "cdc.t_nopk", str(FILES[0]))
    assert events and all(e["pos"] >= start for e in events)
    assert all(e.get("table", "t_nopk") == "t_nopk" for e in events)


def test_changes_of_a_file_not_named_as_a_binlog_are_a_named_error(tmp_path):
    # a change's seq is made of its file's number: a copy named otherwise cannot give one
    copy = tmp_path / "backup.bin"
    copy.write_bytes((CORPUS / "rust_mysql_common/time_issue.000001").read_bytes())
    res = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "decode", "--changes",
                          str(copy)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert "CONFIG_INVALID" in res.stderr and "backup.bin" in res.stderr
    assert "INTERNAL_ERROR" not in res.stderr and "ln -s backup.bin" in res.stderr
    assert _decode(copy).returncode == 0            # its events decode under any name
