"""A stop signal always stops a run, and what fails after it is reported as the stop.

A Python signal handler runs between two bytecodes of the main thread, and Py4J releases
Java objects from weakref callbacks: a SIGTERM that lands in one raised its
KeyboardInterrupt inside the callback, where Python prints it ("Exception ignored in")
and drops it. The run went on, the JVM (sent the same SIGTERM by the service manager)
died under it, and the CLI ended with INTERNAL_ERROR ConnectionRefusedError. Each case
runs in a process of its own (the handler's state is the process's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": SRC})


def test_an_interrupt_dropped_in_a_finalizer_is_delivered_again():
    done = _run("""
        import os, signal, weakref
        from mysqlcdc.pipeline.runner import interrupt, stop_requested

        signal.signal(signal.SIGTERM, interrupt)

        class JavaObject:
            pass

        def release(ref):                  # as Py4J's weakref callback: the signal lands here
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass

        obj = JavaObject()
        ref = weakref.ref(obj, release)
        try:
            del obj
            for _ in range(10 ** 7):       # the run going on
                pass
            print("went on")
        except KeyboardInterrupt:
            print("stopped", stop_requested())
    """)
    assert done.stdout.strip() == "stopped True", done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_error_after_a_stop_signal_is_the_stop(tmp_path):
    """The JVM gone under a call after the SIGTERM: `run` says stopped, exit 130."""
    config = tmp_path / "pipeline.yaml"
    config.write_text("name: p\nsource: {host: 127.0.0.1, user: cdc, server_id: 5}\n"
                      "spark: {checkpoint: ./ck}\nsinks: [{console: {}}]\n")
    done = _run(f"""
        import signal
        from mysqlcdc.cli import main as cli
        from mysqlcdc.pipeline import runner

        def run_pipeline(cfg, **kw):
            try:
                runner.interrupt(signal.SIGTERM, None)
            except KeyboardInterrupt:
                pass                       # dropped where it landed
            raise ConnectionRefusedError(111, "Connection refused")

        runner.run_pipeline = run_pipeline
        import sys
        sys.argv = ["mysqlcdc", "run", {str(config)!r}]
        cli.main()
    """)
    assert done.returncode == 130, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "stopped" in said and "INTERNAL_ERROR" not in said and "Traceback" not in said, said
