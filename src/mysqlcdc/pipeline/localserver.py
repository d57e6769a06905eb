"""A private, throwaway ``mariadbd`` for the demo and the tests.

Each instance gets its own temp datadir, a free TCP port on 127.0.0.1 and a
unix socket in its datadir, with the binlog on in ROW format unless the caller
asks otherwise. A missing server binary raises, it never skips.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from mysqlcdc.errors import LocalServerError

__all__ = ["MariaDB", "find_binary", "free_port"]

DEFAULT_OPTIONS = {
    "log-bin": "mariadb-bin",
    "binlog-format": "ROW",
    "server-id": "1",
    "binlog-row-image": "FULL",
    "innodb-buffer-pool-size": "64M",
    "innodb-log-file-size": "48M",
    "innodb-flush-log-at-trx-commit": "2",
    "sync-binlog": "0",
    "max-connections": "200",
    "skip-name-resolve": None,
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
    "default-time-zone": "+00:00",
}


BIN_DIR_ENV = "MYSQLCDC_SERVER_BIN"


def _last_line(text: str) -> str:
    """The line that says why: the first ERROR that is not the closing "Aborting"."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line.upper()
              and not line.rstrip().endswith("Aborting")]
    return (errors[:1] or lines[-1:] or ["no output"])[0][:300]


def find_binary(name: str) -> str:
    """The path of a MariaDB server program: in ``$MYSQLCDC_SERVER_BIN`` when that is set,
    else on PATH, in /usr/sbin or /usr/bin. A missing one is a named error (the demo says
    what to install; the test suite fails rather than skip)."""
    folder = os.environ.get(BIN_DIR_ENV)
    places = ([os.path.join(folder, name)] if folder else
              [shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"])
    for candidate in places:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    from mysqlcdc.errors import ServerBinaryMissingError

    raise ServerBinaryMissingError(
        f"{name} not found ({'in ' + folder if folder else 'on PATH, in /usr/sbin or /usr/bin'})"
        ": the throwaway MariaDB needs the MariaDB server installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MariaDB:
    """A running private server. Root has no password over TCP from 127.0.0.1."""

    options: dict[str, str | None] = field(default_factory=dict)
    basedir: Path | None = None
    port: int = 0
    process: subprocess.Popen | None = None
    host: str = "127.0.0.1"
    user: str = "root"
    password: str = ""

    stop_timeout: float = 30.0
    keep: bool = False   # True: ``basedir`` was given and outlives stop()

    def start(self, timeout: float = 60.0) -> "MariaDB":
        """Start the server. With ``basedir`` set, its ``data/`` is reused (installed
        only when missing) and kept on stop; otherwise a temp dir is made and removed."""
        if self.basedir is None:
            self.basedir = Path(tempfile.mkdtemp(prefix="mysqlcdc-mariadb-"))
        else:
            self.basedir, self.keep = Path(self.basedir), True
            self.basedir.mkdir(parents=True, exist_ok=True)
        datadir = self.datadir
        if not (datadir / "mysql").is_dir():
            self._install(datadir)
        self.port = free_port()
        self._spawn(timeout)
        return self

    def _tmpdir(self) -> Path:
        """The server's own temporary folder, made. Two servers sharing /tmp remove each
        other's internal temporary tables: a server removes every ``#sql`` file of its
        folder when it starts, mid-way through another's install ("Could not remove
        temporary table") or query."""
        folder = self.basedir / "tmp"
        folder.mkdir(exist_ok=True)
        return folder

    def _spawn(self, timeout: float) -> None:
        self.process = subprocess.Popen(
            self._command(self.datadir),
            stdout=open(self.basedir / "stdout.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        self._wait_ready(timeout)

    def restart(self, down_s: float = 0.0, timeout: float = 60.0) -> None:
        """Shut the server down cleanly (SIGTERM, as an administrator's restart does),
        stay down ``down_s`` seconds, and start it again on the same port and datadir."""
        self.shutdown()
        time.sleep(down_s)
        self._spawn(timeout)

    def shutdown(self) -> None:
        """Stop the server process but keep its datadir and port for :meth:`resume`."""
        keep, self.keep = self.keep, True
        try:
            self.stop()
        finally:
            self.keep = keep

    def resume(self, timeout: float = 60.0) -> None:
        """Start a server stopped by :meth:`shutdown` again, same port and datadir."""
        self._spawn(timeout)

    def _install(self, datadir: Path) -> None:
        cmd = [
            find_binary("mariadb-install-db"),
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
            f"--tmpdir={self._tmpdir()}",     # passed on to the install's bootstrap server
        ]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise LocalServerError(f"mariadb-install-db failed ({out.returncode}): "
                                   f"{_last_line(out.stderr or out.stdout)}")

    def _command(self, datadir: Path) -> list[str]:
        opts = {**DEFAULT_OPTIONS, **self.options}
        cmd = [
            find_binary("mariadbd"),
            "--no-defaults",
            f"--datadir={datadir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.basedir}/mysqld.sock",
            f"--pid-file={self.basedir}/mysqld.pid",
            f"--tmpdir={self._tmpdir()}",
            f"--log-error={self.basedir}/error.log",
            "--user=root",
        ]
        for key, value in opts.items():
            if value is False:
                continue
            cmd.append(f"--{key}" if value is None else f"--{key}={value}")
        return cmd

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalServerError(f"mariadbd exited at start: {_last_line(self.error_log())} "
                                       f"(log: {self.basedir / 'error.log'})")
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.1)
        raise LocalServerError(f"mariadbd did not accept connections in {timeout}s: "
                               f"{_last_line(self.error_log())} (log: {self.basedir / 'error.log'})")

    def error_log(self) -> str:
        path = self.basedir / "error.log" if self.basedir else None
        return path.read_text(errors="replace")[-4000:] if path and path.exists() else ""

    def connect(self, **kw) -> pymysql.Connection:
        # a private server on loopback has no TLS; without ssl_disabled pymysql would try it
        # and build an SSL context, loading the system's CA bundle, for every connection
        # (about 40 ms each, most of a one-statement sql() call)
        params = dict(host=self.host, port=self.port, user=self.user, password=self.password,
                      autocommit=True, connect_timeout=5, charset="utf8mb4",
                      ssl_disabled=not any(k.startswith("ssl") for k in kw))
        params.update(kw)
        return pymysql.connect(**params)

    def sql(self, *statements: str, db: str | None = None) -> list[tuple]:
        """Run statements in one connection; return the last one's rows."""
        conn = self.connect(database=db) if db else self.connect()
        try:
            rows: list[tuple] = []
            with conn.cursor() as cur:
                for stmt in statements:
                    cur.execute(stmt)
                    rows = list(cur.fetchall()) if cur.description else []
            return rows
        finally:
            conn.close()

    @property
    def url(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.basedir and not self.keep:
            shutil.rmtree(self.basedir, ignore_errors=True)

    @property
    def datadir(self) -> Path:
        return Path(self.basedir) / "data"

    def __enter__(self) -> "MariaDB":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
