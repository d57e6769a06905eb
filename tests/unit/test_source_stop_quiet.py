"""The streaming source runner prints no traceback after Spark closed its socket.

Spark ends a query by closing the socket of the process that runs the stream reader;
PySpark's runner then answers the failed read over that closed socket, and when the
socket was reset that answer raises ``BrokenPipeError``, which Python printed on the
pipeline's stderr after a run that went well. Each case runs in a process of its own
that plays the runner's end: ``stop()`` in a ``finally`` with the read's error in
flight, then a failure printed on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _end_of_a_runner(module: str, error: str) -> str:
    script = textwrap.dedent(f"""
        import sys, types
        sys.modules["__main__"].__spec__ = types.SimpleNamespace(name={module!r})
        from mysqlcdc.spark.source import MysqlcdcStreamReader

        reader = MysqlcdcStreamReader.__new__(MysqlcdcStreamReader)
        reader._planner = None
        try:
            try:
                raise {error}
            finally:
                reader.stop()
        except BaseException:
            print("TRACEBACK AFTER STOP", file=sys.stderr, flush=True)
        print("done", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"            # stdout is untouched either way
    return run.stderr


@pytest.mark.parametrize("error", ["EOFError", "ConnectionResetError(104, 'reset')",
                                   "BrokenPipeError(32, 'broken pipe')"])
def test_the_runner_is_quiet_once_spark_closed_its_socket(error):
    assert "TRACEBACK AFTER STOP" not in _end_of_a_runner(RUNNER, error)


def test_an_error_of_the_readers_own_is_still_printed():
    assert "TRACEBACK AFTER STOP" in _end_of_a_runner(RUNNER, "ValueError('bad offset')")


def test_other_processes_keep_their_stderr_on_a_lost_connection():
    # the decode-ahead and the CLI use the same reader class: their warnings must show
    assert "TRACEBACK AFTER STOP" in _end_of_a_runner("mysqlcdc.pipeline.ahead", "EOFError")
