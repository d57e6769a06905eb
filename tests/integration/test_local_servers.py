"""Private mariadbd servers started side by side (the suite's two workers, the demo, the
fixtures) keep out of each other's temporary files."""

from __future__ import annotations

from mysqlcdc.pipeline.localserver import MariaDB


def test_the_install_and_the_server_use_the_servers_own_temporary_folder(tmp_path, monkeypatch):
    """``mariadb-install-db`` runs a bootstrap server that makes internal temporary
    tables, and a server removes every ``#sql`` file of its temporary folder when it
    starts: in a shared /tmp, a server starting beside an install broke it mid-way ("Could
    not remove temporary table", seen in CI). With ``TMPDIR`` (a server's default
    temporary folder) pointing nowhere, an install that still used the default fails."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "no-such-folder"))
    server = MariaDB(basedir=tmp_path / "server")
    try:
        server.start()
        (folder,), = server.sql("SELECT @@tmpdir")
        assert folder == f"{tmp_path / 'server'}/tmp"
    finally:
        if server.process is not None:
            server.stop()
