"""A private redis-server for tests: free loopback port, temp dir, a password."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mysqlcdc.pipeline.localserver import find_binary, free_port

PASSWORD = "redis-secret"


@dataclass
class RedisServer:
    host: str = "127.0.0.1"
    port: int = 0
    password: str = PASSWORD
    basedir: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    def start(self, timeout: float = 30.0) -> "RedisServer":
        if self.basedir is None:
            self.basedir = Path(tempfile.mkdtemp(prefix="mysqlcdc-redis-"))
        if not self.port:
            self.port = free_port()
        self.process = subprocess.Popen(
            [find_binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.basedir), "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--requirepass", self.password],
            stdout=open(self.basedir / "redis.log", "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("redis-server exited early:\n"
                                   + (self.basedir / "redis.log").read_text()[-3000:])
            try:
                self.client().ping()
                return self
            except Exception:   # noqa: BLE001 - not ready yet
                time.sleep(0.1)
        raise RuntimeError(f"redis-server did not answer in {timeout}s")

    def client(self):
        import redis

        return redis.Redis(host=self.host, port=self.port, password=self.password,
                           socket_timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.process = None

    restart = start

    def destroy(self) -> None:
        self.stop()
        if self.basedir is not None:
            shutil.rmtree(self.basedir, ignore_errors=True)
