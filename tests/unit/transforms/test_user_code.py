"""Checking a pipeline's user code on the driver before anything starts: every mistake a
ConfigError that names it; what gets shipped to executors."""

from __future__ import annotations

import sys
import zipfile

import pytest

from mysqlcdc.config import load_pipeline_from_dict
from mysqlcdc.errors import ConfigError
from mysqlcdc.pipeline.transforms import check_user_code

pytestmark = pytest.mark.unit


def _cfg(tmp_path, function="i15uc_pkg.code:fn", helpers=(), plugins=None):
    sinks = [{"console": {}}]
    if plugins:
        sinks.append({"plugins": {"plugins": plugins}})
    return load_pipeline_from_dict({
        "name": "p", "source": {"host": "h", "user": "u", "server_id": 9},
        "spark": {"checkpoint": str(tmp_path / "ck")},
        "transforms_path": [str(tmp_path / "code")], "helpers": list(helpers),
        "transforms": [{"python": {"function": function}}], "sinks": sinks})


@pytest.fixture
def code(tmp_path):
    pkg = tmp_path / "code" / "i15uc_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "code.py").write_text("def fn(event):\n    return event\n\nNOT_A_FUNCTION = 3\n")
    (pkg / "broken.py").write_text("import no_such_module_i15\n")
    (pkg / "plug.py").write_text("class P:\n    pass\n\ndef not_a_class():\n    pass\n")
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("i15uc_pkg")]:
        del sys.modules[name]


def test_good_code_is_zipped_for_the_executors(code):
    files = check_user_code(_cfg(code, plugins=["i15uc_pkg.plug:P"]))
    assert len(files) == 1 and files[0].endswith(".zip")
    assert sorted(zipfile.ZipFile(files[0]).namelist()) == [
        "i15uc_pkg/__init__.py", "i15uc_pkg/broken.py", "i15uc_pkg/code.py", "i15uc_pkg/plug.py"]
    assert check_user_code(_cfg(code)) == files          # same code, same file


@pytest.mark.parametrize("kwargs, fragment", [
    ({"function": "i15uc_pkg.nope:fn"}, "cannot import module 'i15uc_pkg.nope'"),
    ({"function": "i15uc_pkg.broken:fn"}, "No module named 'no_such_module_i15'"),
    ({"function": "i15uc_pkg.code:missing"}, "has no 'missing'"),
    ({"function": "i15uc_pkg.code:NOT_A_FUNCTION"}, "is not a function"),
    ({"helpers": ["i15uc_pkg.nope"]}, "helpers: cannot import module"),
    ({"plugins": ["i15uc_pkg.plug:not_a_class"]}, "is not a class"),
])
def test_mistakes_are_named(code, kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        check_user_code(_cfg(code, **kwargs))
