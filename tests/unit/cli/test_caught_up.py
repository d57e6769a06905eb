"""The line `mysqlcdc run --until-idle` ends with, and the end offsets it is made of."""

from __future__ import annotations

import json

from mysqlcdc.capture import batchend
from mysqlcdc.cli.main import caught_up
from mysqlcdc.pipeline.runner import last_end
from mysqlcdc.types import BinlogPosition


class _Query:
    def __init__(self, progress):
        self.lastProgress = progress


def _progress(end) -> dict:
    return {"sources": [{"endOffset": end if isinstance(end, str) else json.dumps(end)}]}


def test_the_earliest_end_of_the_sinks_is_where_the_pipeline_caught_up():
    ends = [{"file": "mysql-bin.000010", "pos": 4, "gtid": "0-1-9"},
            {"file": "mysql-bin.000009", "pos": 900}]       # file 9 comes first, by number
    assert caught_up("shop", ends) == "pipeline shop: caught up with the server at mysql-bin.000009:900"
    assert caught_up("shop", ends[:1]) == ("pipeline shop: caught up with the server at "
                                           "mysql-bin.000010:4 (GTID set 0-1-9)")
    assert "nothing new to read" in caught_up("shop", [])


def test_a_plain_end_offset_is_taken_as_it_is():
    end = {"file": "mysql-bin.000003", "pos": 1234, "gtid": "0-1-5", "ts": 1}
    assert last_end(_Query(_progress(end))) == end
    assert last_end(_Query(None)) is None
    assert last_end(_Query({"sources": []})) is None
    assert last_end(_Query(_progress("not json"))) is None


def test_an_end_its_read_tasks_found_is_resolved_through_their_record(tmp_path):
    pending = {"file": "mysql-bin.000003", "pos": 4,
               "upto": {"file": "mysql-bin.000005", "pos": 344, "events": 500000},
               "gtid": "0-1-5"}
    query = _Query(_progress(pending))
    # no record (yet): no end is claimed, not even the batch's start
    assert last_end(query, [str(tmp_path)]) is None
    found = batchend.Found(BinlogPosition.of("mysql-bin.000003", 4),
                           BinlogPosition.of("mysql-bin.000005", 344), "cap", 10, 1000, 7,
                           [], {}, "0-1-9", 1700000000000)
    path = batchend.record_path(tmp_path, pending)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found.to_json()))
    end = last_end(query, [str(tmp_path / "elsewhere"), str(tmp_path)])
    assert (end["file"], end["pos"], end["gtid"], end["ts"]) == \
        ("mysql-bin.000005", 344, "0-1-9", 1700000000000)
    assert "upto" not in end


def test_every_command_lists_a_one_line_summary():
    # the command list shows a docstring's first paragraph: a line break there used to
    # break the listing in the middle of a sentence
    import inspect

    from mysqlcdc.cli.main import app

    def commands(typer_app):
        for info in typer_app.registered_commands:
            yield info.callback
        for group in typer_app.registered_groups:
            yield from commands(group.typer_instance)

    found = list(commands(app))
    assert len(found) >= 15
    for callback in found:
        first = inspect.cleandoc(callback.__doc__ or "").split("\n\n")[0]
        assert first and "\n" not in first, callback.__name__
