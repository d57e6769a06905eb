"""XA transactions in a real MariaDB 10.11 binlog, decoded offline (capture.xa)."""

from __future__ import annotations

from mysqlcdc.capture.offline import iter_file_batches

from tests.corpus.conftest import CORPUS


def test_the_committed_xa_transaction_is_output_at_its_commit_the_rolled_back_one_never():
    """``mariadb-bin.000004``: one XA transaction prepared then committed (its row is
    output as the XA COMMIT's change: that group's GTID and position), one prepared then
    rolled back (its row stays in the binlog and is never output)."""
    path = CORPUS / "local-mariadb-10.11/mariadb-bin.000004"
    rows = [r for b in iter_file_batches([str(path)]) for r in b.to_pylist()]
    assert not any("xa rollback" in (r["after"] or "") for r in rows)
    [committed] = [r for r in rows if '"xa"' in (r["after"] or "")]
    assert (committed["pos"], committed["gtid"]) == (3644, "0-1-36")
    assert rows == sorted(rows, key=lambda r: r["seq"])
