"""A Spark standalone cluster on loopback: one master and N workers, from pyspark's own
launcher (``bin/spark-class``; the pyspark wheel ships ``sbin/spark-daemon.sh`` but not
``start-master.sh`` / ``start-worker.sh``, which only wrap the same classes).

Each process is a child of this one, on free ports, with its work and log folders in a
temp dir; :meth:`StandaloneCluster.stop` ends the workers, their executors and the
master (also when start fails half way).

>>> with StandaloneCluster(workers=2).start() as cluster:     # doctest: +SKIP
...     print(cluster.url)                                     # spark://127.0.0.1:PORT
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from mysqlcdc.pipeline.localserver import free_port

__all__ = ["StandaloneCluster", "spark_home"]


def spark_home() -> Path:
    """The pyspark package folder: what SPARK_HOME is for a pip-installed Spark."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """``workers`` workers of ``cores`` cores and ``memory`` each, and their master."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.folder = Path(tempfile.mkdtemp(prefix="mysqlcdc-spark-cluster-"))
        self._procs: list[subprocess.Popen] = []

    # -- lifecycle -------------------------------------------------------------
    def start(self, timeout_s: float = 180.0) -> "StandaloneCluster":
        try:
            self._launch("master", "org.apache.spark.deploy.master.Master",
                         "--host", "127.0.0.1", "--port", str(self.port),
                         "--webui-port", str(self.ui_port))
            for i in range(self.workers):
                work = self.folder / f"worker-{i}"
                work.mkdir()
                self._launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                             "--host", "127.0.0.1", "--port", str(free_port()),
                             "--webui-port", str(free_port()), "--cores", str(self.cores),
                             "--memory", self.memory, "--work-dir", str(work))
            self._wait_alive(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Workers first (they kill their executors), then the master; never leaves one."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in reversed(self._procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._procs = []
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "StandaloneCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what it did -------------------------------------------------------------
    def state(self) -> dict:
        """The master's own account (``/json``): workers, cores, applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as r:
            return json.loads(r.read())

    def executor_folders(self) -> list[Path]:
        """One folder per executor a worker launched (``<work>/<app id>/<executor id>``)."""
        return sorted(p for p in self.folder.glob("worker-*/app-*/*") if p.is_dir())

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- helpers -------------------------------------------------------------------
    def _launch(self, name: str, cls: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable,
               "SPARK_WORKER_DIR": str(self.folder)}
        log = open(self.folder / f"{name}.log", "wb")
        self._procs.append(subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), cls, *args], env=env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_alive(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for i, proc in enumerate(self._procs):
                if proc.poll() is not None:
                    name = "master" if i == 0 else f"worker-{i - 1}"
                    raise RuntimeError(f"spark {name} exited ({proc.returncode}):\n"
                                       f"{self.log(name)[-3000:]}")
            try:
                if self.state().get("aliveworkers", 0) >= self.workers:
                    return
            except (OSError, ValueError):   # not listening yet, or an empty page while
                pass                        # the master's web UI starts
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standalone cluster did not come up in {timeout_s:.0f} s:"
                                   f"\n{self.log('master')[-3000:]}")
            time.sleep(0.5)
