"""`mysqlcdc run` with mistakes in user code: one named line, no Spark, no server needed;
a failing transform's traceback printed after the hint."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from mysqlcdc.cli.main import _fail
from mysqlcdc.errors import TransformError

pytestmark = pytest.mark.unit


def test_a_missing_user_module_stops_before_anything_starts(tmp_path):
    config = tmp_path / "p.yaml"
    config.write_text(
        "name: p\nsource: {host: 127.0.0.1, port: 1, user: u, server_id: 9}\n"
        "spark: {checkpoint: ./ck}\n"
        "transforms:\n  - python: {function: 'no_such_pkg_i15.cdc:transform'}\n"
        "sinks:\n  - console: {}\n")
    res = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    said = " ".join(res.stderr.split())       # the console wraps long lines
    assert "[CONFIG_INVALID] python transform 'no_such_pkg_i15.cdc:transform': cannot " \
           "import module 'no_such_pkg_i15.cdc'" in said
    assert "Traceback" not in res.stderr and not (tmp_path / "ck").exists()


def test_the_users_traceback_follows_the_hint(capsys):
    err = TransformError("transforms[0] (python) m:f failed on shop.t key {\"id\":1}",
                         detail='Traceback (most recent call last):\n  File "m.py", line 3, '
                                'in f\nValueError: no')
    with pytest.raises(typer.Exit):
        _fail(err)
    out = capsys.readouterr().err
    assert out.index("[TRANSFORM_FAILED]") < out.index("hint:") < out.index('File "m.py"')
    assert out.rstrip().endswith("ValueError: no")
