"""The benchmark's mariadbd: the test fixture's server, on a datadir that persists.

The test fixture starts a throwaway server in a temp dir and deletes
it on stop. Benchmarks want the opposite: generate the binlogs once under
``bench/data/`` and reuse them across runs. ``BenchServer`` gives the
launcher a basedir under bench/data (reused, kept on stop) and faster, less
durable server options.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DATA_ROOT = BENCH_DIR / "data"
OUT_DIR = BENCH_DIR / "out"

# Appended, not prepended: a PYTHONPATH that points at another copy of the
# sources (compare.py --src-commit) must win over the working tree.
for _path in (str(REPO_ROOT), str(REPO_ROOT / "src")):
    if _path not in sys.path:
        sys.path.append(_path)

from tests.support.mariadb import MariaDB  # noqa: E402

__all__ = ["BenchServer", "BENCH_OPTIONS", "DATA_ROOT", "OUT_DIR", "REPO_ROOT", "compile_bytecode",
           "data_dir_for"]


def compile_bytecode(src: Path) -> None:
    """Write the bytecode of the ``mysqlcdc`` package under ``src``, as installing it does.

    A run of mysqlcdc is some eight Python processes (the driver, the decode-ahead and
    its helper, Spark's planner and read-task workers), and each imports the package.
    Python normally keeps each module's bytecode after its first import, but not where
    ``PYTHONDONTWRITEBYTECODE`` is set (as it is on some CI and agent machines): there
    every process compiled the package again, 0.1-0.3 CPU s each, a cost no installed
    copy pays. Compiled here once, every process reads the bytecode (that variable only
    stops writing it); a module edited later is compiled again when it is imported.
    """
    import compileall

    compileall.compile_dir(str(src / "mysqlcdc"), quiet=2)


compile_bytecode(REPO_ROOT / "src")

# Throughput over durability: the server exists only to write binlogs.
# binlog_row_metadata is deliberately left at MariaDB's default (NO_LOG), so
# column names must come from information_schema, as on most real servers.
BENCH_OPTIONS: dict[str, str | None] = {
    "innodb-buffer-pool-size": "2G",
    "innodb-log-file-size": "1G",
    "innodb-log-buffer-size": "64M",
    "innodb-flush-log-at-trx-commit": "0",
    "innodb-doublewrite": "0",
    "sync-binlog": "0",
    "binlog-cache-size": "16M",
    "max-binlog-size": "1G",
    "max-allowed-packet": "256M",
}


def data_dir_for(rows: int, seed: int) -> Path:
    """One directory per (rows, seed): a --small run never clobbers the full set."""
    return DATA_ROOT / f"rows{rows}-seed{seed}"


@dataclass
class BenchServer(MariaDB):
    """A mariadbd whose datadir is ``<basedir>/data`` and survives ``stop()``."""

    stop_timeout: float = 120.0

    def start(self, timeout: float = 120.0) -> "BenchServer":
        if self.basedir is None:
            raise ValueError("BenchServer needs a basedir")
        # (its own tmpdir, <basedir>/tmp, comes with every MariaDB of localserver)
        self.options = {**BENCH_OPTIONS, **self.options}
        super().start(timeout)
        return self

    def pin(self, cpus: set[int]) -> None:
        """Keep the server off the core the measured client runs on."""
        if self.process is None:
            return
        for tid in os.listdir(f"/proc/{self.process.pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:
                pass
