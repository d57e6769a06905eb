"""User python transforms in a chain (no Spark): results, fan-out, helpers, both error modes,
the dead-letter Parquet folder, and the error text the CLI rebuilds from Spark's."""

from __future__ import annotations

import sys
import textwrap

import orjson
import pyarrow as pa
import pytest

from mysqlcdc.errors import TransformError, TransformResultError, from_text
from mysqlcdc.sinks.dead_letter import make_writer, read_dead_letters
from mysqlcdc.sinks.dead_letter.settings import DeadLetterSettings
from mysqlcdc.transforms.api import TaskPlace
from mysqlcdc.transforms.chain import Chain
from mysqlcdc.transforms.python import PythonTransform

from tests.unit.transforms.rows import batch, row

pytestmark = pytest.mark.unit

USER_CODE = textwrap.dedent('''
    import pyarrow as pa
    import pyarrow.compute as pc

    def upper_name(event, helpers):
        if event["op"] == "d":
            return None
        if event["after"].get("name") == "boom":
            raise ValueError("no booms here")
        event["after"]["name"] = event["after"]["name"].upper()
        event["after"]["email"] = helpers.mask(event["after"]["email"], 3)
        event["after"]["tag"] = helpers.shout("x")
        return event

    def fan_out(event):
        return [event, {"table": "audit", "after": {"id": event["after"]["id"]}}]

    def bad_result(event):
        return 42

    def new_column(event):
        return {**event, "region": "eu"}

    def unknown_key(event):
        return {**event, "nope": 1}

    def batch_fn(batch):
        return batch.filter(pc.equal(batch.column("op"), "c"))

    def bad_batch(batch):
        raise RuntimeError("batch says no")
''')
HELPERS = "def shout(text):\n    return text.upper() + '!'\n\ndef _private():\n    pass\n"


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    (tmp_path / "ucode_i15.py").write_text(USER_CODE)
    (tmp_path / "uhelpers_i15.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("ucode_i15", "uhelpers_i15"):
        sys.modules.pop(name, None)
    from mysqlcdc.transforms import python as mod

    mod._FUNCTIONS.clear()


def _rows():
    return batch(row("c", "user", after={"id": 1, "name": "ada", "email": "ada@x.io"}),
                 row("c", "user", after={"id": 2, "name": "boom", "email": "b@x.io"}),
                 row("d", "user", before={"id": 3, "name": "gone", "email": "g@x.io"}))


def _run(transform, rows, dead=None, helpers=("uhelpers_i15",)):
    chain = Chain([transform], pipeline="p", sink="0-kafka", helpers=helpers, dead_letters=dead)
    place = TaskPlace("p", "0-kafka", "qid", 5, 1, 0)
    out = list(chain.run_stage(0, [rows], place, rows.schema))
    return pa.Table.from_batches(out, schema=chain.schema_after(0, rows.schema)) if out else None


def _after(table):
    return [orjson.loads(t) if t else None for t in table.column("after").to_pylist()]


def test_fail_names_the_event_and_carries_the_traceback(user_code):
    with pytest.raises(TransformError) as err:
        _run(PythonTransform("ucode_i15:upper_name"), _rows())
    msg = err.value.message
    assert "ucode_i15:upper_name" in msg and "shop.user" in msg and '{"id":2}' in msg
    assert "mariadb-bin.000001:100" in msg and "ValueError: no booms here" in msg
    assert 'raise ValueError("no booms here")' in err.value.detail
    assert "mysqlcdc/transforms" not in err.value.detail       # the user's frames only
    rebuilt = from_text(f"py4j... Traceback ...\nmysqlcdc.errors.TransformError: {err.value}\n")
    assert rebuilt.code == "TRANSFORM_FAILED" and rebuilt.detail == err.value.detail.rstrip("\n")


def test_dead_letter_parks_the_event_and_goes_on(user_code, tmp_path):
    dead = make_writer(DeadLetterSettings(path=str(tmp_path / "dead")))
    out = _run(PythonTransform("ucode_i15:upper_name", on_error="dead_letter"), _rows(), dead)
    assert _after(out) == [{"id": 1, "name": "ADA", "email": "*****.io", "tag": "X!"}]
    letters = read_dead_letters(str(tmp_path / "dead")).to_pylist()
    assert len(letters) == 1
    letter = letters[0]
    assert orjson.loads(letter["after"])["name"] == "boom" and letter["key"] == '{"id":2}'
    assert letter["error_type"] == "ValueError" and "no booms" in letter["error_message"]
    assert "no booms here" in letter["error_traceback"] and letter["batch_id"] == 5
    assert letter["transform"].endswith("ucode_i15:upper_name") and letter["sink"] == "0-kafka"
    # a replayed batch replaces its file: still one letter
    _run(PythonTransform("ucode_i15:upper_name", on_error="dead_letter"), _rows(), dead)
    assert read_dead_letters(str(tmp_path / "dead")).num_rows == 1


def test_fan_out_inherits_fields(user_code):
    out = _run(PythonTransform("ucode_i15:fan_out"), _rows().slice(0, 1))
    assert out.column("table").to_pylist() == ["user", "audit"]
    assert out.column("seq").to_pylist()[0] == out.column("seq").to_pylist()[1]
    assert _after(out)[1] == {"id": 1}


def test_results_that_are_not_events_are_errors(user_code):
    with pytest.raises(TransformResultError, match="returned a int"):
        _run(PythonTransform("ucode_i15:bad_result"), _rows())
    with pytest.raises(TransformResultError, match="unknown field"):
        _run(PythonTransform("ucode_i15:unknown_key"), _rows())


def test_declared_columns(user_code):
    out = _run(PythonTransform("ucode_i15:new_column", columns={"region": pa.string()}), _rows())
    assert out.column("region").to_pylist() == ["eu"] * 3


def test_batch_function_and_its_failure(user_code, tmp_path):
    out = _run(PythonTransform(batch_function="ucode_i15:batch_fn"), _rows())
    assert out.column("op").to_pylist() == ["c", "c"]
    with pytest.raises(TransformError, match="RuntimeError: batch says no"):
        _run(PythonTransform(batch_function="ucode_i15:bad_batch"), _rows())
    dead = make_writer(DeadLetterSettings(path=str(tmp_path / "dl")))
    assert _run(PythonTransform(batch_function="ucode_i15:bad_batch", on_error="dead_letter"),
                _rows(), dead) is None
    assert read_dead_letters(str(tmp_path / "dl")).num_rows == 3


def test_helper_name_clash_is_a_config_error(user_code, tmp_path):
    from mysqlcdc.errors import ConfigError
    from mysqlcdc.transforms.helpers import Helpers

    (tmp_path / "uclash_i15.py").write_text("def mask(x):\n    return x\n")
    with pytest.raises(ConfigError, match="built-in helper 'mask'"):
        Helpers.build(["uclash_i15"])
    assert Helpers.build(["uhelpers_i15"]).names() == ["hash", "mask", "obfuscate", "shout"]
