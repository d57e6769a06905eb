"""Spark creates the source in a Python process of its own and asks it only for its
schema, which with a task writer is the writer's DDL: unpickling a sink's task writer and
asking it for that imports no pyarrow (a sixth of a CPU second, in every run's planning).
The writer's ``write`` brings what it needs where it runs, in the read task."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from mysqlcdc.sinks.changelog.settings import ChangelogSettings
from mysqlcdc.sinks.changelog.writer import task_writer as changelog_writer
from mysqlcdc.sinks.kafka import task_writer as kafka_writer
from mysqlcdc.sinks.kafka.settings import KafkaSettings

pytestmark = pytest.mark.unit

_CHECK = """
import pickle, sys
writer = pickle.loads(sys.stdin.buffer.read())
print(writer.ddl)
print(sorted(m for m in ("pyarrow", "numpy", "pandas", "confluent_kafka") if m in sys.modules))
"""


@pytest.mark.parametrize("make", [
    lambda tmp: changelog_writer(ChangelogSettings(path=str(tmp / "changelog"))),
    lambda tmp: kafka_writer(KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:9"})),
], ids=["changelog", "kafka"])
def test_a_task_writer_gives_its_schema_without_pyarrow(make, tmp_path):
    writer = make(tmp_path)
    assert writer is not None
    out = subprocess.run([sys.executable, "-c", _CHECK], input=pickle.dumps(writer),
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    ddl, imported = out.stdout.decode().strip().splitlines()
    assert ddl == writer.ddl and "STRING" in ddl.upper()
    assert imported == "[]"
