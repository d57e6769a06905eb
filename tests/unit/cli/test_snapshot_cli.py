"""How a snapshot's progress reads on `mysqlcdc run`'s status line and `mysqlcdc status`."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.cli.main import snapshot_note
from mysqlcdc.pipeline.runner import snapshot_status

pytestmark = pytest.mark.unit


def test_the_status_line_names_table_chunks_and_eta():
    assert snapshot_note({}) == "" and snapshot_note({"phase": "idle", "table": None}) == ""
    note = snapshot_note({"phase": "initial", "table": "shop.orders", "chunks_done": 12,
                          "chunks_estimate": 40, "eta_s": 65.0, "tables_left": 2})
    assert note == " · initial shop.orders 12/~40 chunks, ETA 1m05s, 2 more table(s)"
    assert snapshot_note({"phase": "backfill", "table": "s.a", "chunks_done": 0}) == \
        " · backfill s.a 0 chunks"


def test_the_busiest_sink_is_reported(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert snapshot_status([str(a), str(b)]) is None
    (a / "snapshot-status.json").write_text(json.dumps({"phase": "idle", "tables_done": 3}))
    (b / "snapshot-status.json").write_text(json.dumps({"phase": "initial", "tables_done": 1,
                                                        "chunks_done": 4}))
    assert snapshot_status([str(a), str(b)])["phase"] == "initial"
    (b / "snapshot-status.json").write_text("{broken")
    assert snapshot_status([str(a), str(b)])["phase"] == "idle"
