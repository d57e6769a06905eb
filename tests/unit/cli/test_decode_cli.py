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
