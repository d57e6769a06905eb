"""The py4j converters ``build_session`` puts in place of pyspark's numpy ones: the same
answers, without importing ``pyspark.testing`` (and pandas) at the first call into the
JVM."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_PROBE = """
import json, sys
import numpy as np
import pyspark.sql.types  # registers pyspark's converters
from py4j import protocol
from mysqlcdc.spark.session import _light_numpy_converter

def answers():
    values = [1, "a", 2.5, np.int64(7), np.float32(1.5), np.array([1, 2]), np.zeros((2, 2))]
    return [[type(c).__name__ for c in protocol.INPUT_CONVERTER if c.can_convert(v)]
            for v in values]

_light_numpy_converter()
light = answers()
print(json.dumps({"light": light, "testing": "pyspark.testing" in sys.modules,
                  "pandas": "pandas" in sys.modules,
                  "count": len(protocol.INPUT_CONVERTER)}))
"""


def test_numpy_values_convert_as_before_without_importing_pandas():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True)
    got = json.loads(out.stdout)
    assert not got["testing"] and not got["pandas"]
    plain, text, real, scalar, scalar32, array, matrix = got["light"]
    assert plain == [] and text == [] and real == [] and "_Array" not in matrix
    assert scalar == ["_Scalar"] and scalar32 == ["_Scalar"] and array[0] == "_Array"

    before = subprocess.run([sys.executable, "-c", _PROBE.replace("_light_numpy_converter()\n",
                                                                  "")],
                            capture_output=True, text=True, check=True)
    original = json.loads(before.stdout)
    assert original["testing"]                      # pyspark's own import it
    assert original["count"] == got["count"]
    ours = {"_Array": "NumpyArrayConverter", "_Scalar": "NumpyScalarConverter"}
    assert [[ours.get(n, n) for n in a] for a in got["light"]] == original["light"]
