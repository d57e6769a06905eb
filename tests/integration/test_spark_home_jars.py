"""The SPARK_HOME of the start-up cache leaves Spark's ML library out
(``warmstart.LEFT_OUT``): its session extension registered ML functions through Scala's
runtime reflection at every session's start. A session of a JVM started from that
SPARK_HOME knows Spark's own functions and not the ML ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mysqlcdc.spark import warmstart

pytestmark = pytest.mark.integration


def test_a_session_on_the_caches_spark_home_has_no_ml_functions(tmp_path):
    env = tmp_path / "cache"
    script = tmp_path / "session.py"
    script.write_text(
        "import os\n"
        "from mysqlcdc.spark import build_session\n"
        "s = build_session('local[1]', 'ml-check', {})\n"
        "print(os.environ['SPARK_HOME'])\n"
        "print(s.catalog.functionExists('array_sort'), "
        "s.catalog.functionExists('vector_to_array'))\n"
        "s.stop()\n")
    given = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env={**given, warmstart.ENV_CACHE: str(env),
                                           warmstart.ENV_SWITCH: "1",
                                           "PYSPARK_PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr[-3000:]
    home, found = out.stdout.strip().splitlines()[-2:]
    assert Path(home).parent == env
    assert found == "True False"
