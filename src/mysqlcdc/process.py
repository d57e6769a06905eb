"""How mysqlcdc's own processes end: the ``mysqlcdc`` command and its decode-ahead."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code: int) -> NoReturn:
    """Ends a command whose work is done, without the interpreter's teardown.

    Python's exit steps that matter are taken as the interpreter takes them: threads that
    are not daemons are joined (and ``threading``'s own exit hooks run), then the
    ``atexit`` functions, then the output is flushed. What is skipped is the teardown of
    the modules a command imported (pyspark, pyarrow, numpy, ... some 800), which took
    0.17-0.2 s after every ``mysqlcdc run`` and does nothing a user can see: its
    Spark JVM ends on its own when this process does, as it did. The decode-ahead
    processes end the same way (DESIGN.md decision 28)."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    run_exit = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exit is None:     # another Python: its own exit
        sys.exit(code)
    shutdown()
    run_exit()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):            # a closed pipe, a closed stream
            pass
    os._exit(code)
