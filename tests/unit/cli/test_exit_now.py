"""``exit_now``: a finished command skips the interpreter's teardown, not Python's exit
steps (threads joined, ``atexit`` functions, buffered output flushed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from pathlib import Path
    from mysqlcdc.process import exit_now

    folder = Path(sys.argv[1])

    def late_thread():
        time.sleep(0.3)
        (folder / "thread").write_text("joined")

    threading.Thread(target=late_thread).start()              # not a daemon
    atexit.register(lambda: (folder / "atexit").write_text("ran"))
    for i in range(50_000):                                   # block-buffered: a pipe
        print(f"line {i}")
    sys.stderr.write("last words")
    exit_now(3)
    (folder / "after").write_text("should not run")
""")


def test_exit_now_keeps_every_exit_step_that_matters(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 50_000 and lines[-1] == "line 49999"
    assert done.stderr.endswith("last words")
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "after").exists()


def test_exit_now_into_a_closed_pipe_ends_quietly(tmp_path):
    """A reader that stopped early (``| head``) closed the pipe while the output waited
    in the buffer: the flush fails, and the command still ends with its own code, its
    ``atexit`` functions run, no traceback."""
    script = textwrap.dedent("""
        import atexit, os, sys, time
        from pathlib import Path
        from mysqlcdc.process import exit_now

        folder = Path(sys.argv[1])
        sys.stdout = open(sys.stdout.fileno(), "w", buffering=1 << 20, closefd=False)
        atexit.register(lambda: (folder / "atexit").write_text("ran"))
        print("x" * 1000)                       # stays in the buffer
        while not (folder / "go").exists():     # until the reader has gone
            time.sleep(0.01)
        exit_now(3)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    (tmp_path / "go").write_text("")
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 3, err
    assert "Traceback" not in err
    assert (tmp_path / "atexit").read_text() == "ran"
