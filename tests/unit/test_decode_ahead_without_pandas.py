"""The decode-ahead process does without pandas (``pipeline/ahead.py``): pyarrow would
import it at the first ``pa.array`` of a list. The decoder's whole path to Arrow, run
with pandas unimportable, gives the same record batches and leaves pandas unimported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CORPUS = Path(os.environ.get("MYSQLCDC_CORPUS",
                             Path(__file__).resolve().parents[2].parent / "shared/corpus/binlogs"))
FILES = [str(CORPUS / "local-mariadb-10.11" / f"mariadb-bin.00000{i}") for i in range(1, 5)]

_PROBE = """
import hashlib, json, sys
if sys.argv[1] == "blocked":
    from mysqlcdc.pipeline.ahead import _WithoutPandas
    sys.meta_path.insert(0, _WithoutPandas())
from mysqlcdc.capture.offline import iter_file_batches
digest, rows = hashlib.sha256(), 0
for batch in iter_file_batches(sys.argv[2:]):
    rows += batch.num_rows
    digest.update(repr(batch.to_pylist()).encode())
try:
    import pandas  # noqa: F401
    importable = True
except ImportError:
    importable = False
print(json.dumps({"rows": rows, "digest": digest.hexdigest(),
                  "imported": "pandas" in sys.modules, "importable": importable}))
"""


def _probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode, *FILES], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_decoding_without_pandas_gives_the_same_batches():
    blocked, plain = _probe("blocked"), _probe("plain")
    assert blocked["rows"] == plain["rows"] > 30
    assert blocked["digest"] == plain["digest"]
    assert not blocked["imported"] and not blocked["importable"]
    assert plain["importable"]          # the block, not the machine, kept pandas out
