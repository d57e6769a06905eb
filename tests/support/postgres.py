"""A private PostgreSQL 15 server for tests: temp datadir, free loopback port.

PostgreSQL refuses to run as root, so initdb and postgres run as the ``postgres``
user (``runuser``) when the tests run as root. A missing binary fails, never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mysqlcdc.pipeline.localserver import free_port

BIN = Path("/usr/lib/postgresql/15/bin")
PASSWORD = "mirror-secret"


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class PostgreSQL:
    """A running private server; user ``postgres`` with password :data:`PASSWORD`."""

    host: str = "127.0.0.1"
    port: int = 0
    user: str = "postgres"
    password: str = PASSWORD
    dbname: str = "postgres"
    basedir: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    def start(self, timeout: float = 60.0) -> "PostgreSQL":
        for name in ("initdb", "postgres"):
            if not (BIN / name).exists():
                raise RuntimeError(f"{BIN / name} not found: apt-get install postgresql-15")
        if self.basedir is None:
            self.basedir = Path(tempfile.mkdtemp(prefix="mysqlcdc-pg-"))
            os.chmod(self.basedir, 0o777)
            pwfile = self.basedir / "pw"
            pwfile.write_text(self.password + "\n")
            os.chmod(pwfile, 0o644)
            data = self.basedir / "data"
            out = subprocess.run(_as_postgres([str(BIN / "initdb"), "-D", str(data), "-U", self.user,
                                               "--auth=scram-sha-256", f"--pwfile={pwfile}",
                                               "-E", "UTF8", "--no-sync"]),
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"initdb failed:\n{out.stdout}\n{out.stderr}")
        if not self.port:
            self.port = free_port()
        return self._launch(timeout)

    def _launch(self, timeout: float) -> "PostgreSQL":
        log = open(self.basedir / "server.log", "ab")
        self.process = subprocess.Popen(
            _as_postgres([str(BIN / "postgres"), "-D", str(self.basedir / "data"),
                          "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.basedir),
                          "-c", "fsync=off", "-c", "max_connections=50"]),
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited early:\n{self.log()}")
            try:
                self.connect().close()
                return self
            except Exception:   # noqa: BLE001 - not ready yet
                time.sleep(0.2)
        raise RuntimeError(f"postgres did not accept connections in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        path = self.basedir / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def connect(self, **kw):
        import psycopg

        return psycopg.connect(host=self.host, port=self.port, user=self.user,
                               password=self.password, dbname=self.dbname, connect_timeout=5,
                               **kw)

    def sql(self, statement: str, params=None) -> list[tuple]:
        with self.connect(autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def stop(self) -> None:
        """Stop the server, keep the datadir (``restart`` reuses it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()     # smart shutdown would wait for clients: use fast
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self, timeout: float = 60.0) -> "PostgreSQL":
        return self._launch(timeout)

    def destroy(self) -> None:
        self.stop()
        if self.basedir is not None:
            shutil.rmtree(self.basedir, ignore_errors=True)
