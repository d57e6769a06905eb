"""Row images as the server's own ``mariadb-binlog`` prints them: a reference decoder.

``mariadb-binlog --base64-output=decode-rows -vv`` prints each row change as a
block of ``###`` lines::

    ### UPDATE `db`.`t`
    ### WHERE
    ###   @1=7 /* INT meta=0 nullable=0 is_null=0 */
    ###   @2='a\\x0ab' /* VARSTRING(40) meta=40 nullable=1 is_null=0 */
    ### SET
    ###   @1=7 /* INT meta=0 nullable=0 is_null=0 */
    ###   @2=NULL /* VARSTRING(40) meta=40 nullable=1 is_null=1 */

``-vv`` adds the ``/* type meta=... */`` comment, which delimits the value even when
it is a string holding spaces or quotes. Values stay raw bytes here: strings are
printed in the column's own charset, byte for byte, except bytes below 0x20, which
become ``\\xNN`` (quotes and backslashes are *not* escaped, so the rendering is not
reversible; compare by rendering the other side the same way, see ``quoted``).
Lines are split on ``\\n`` only: a newline inside a value is always escaped.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mysqlcdc.pipeline.localserver import find_binary

__all__ = ["Printed", "PrintedChange", "binlog_files", "print_rows", "parse_rows", "quoted"]


@dataclass(frozen=True)
class Printed:
    """One ``@N=`` value: the text after ``=`` (FLOAT keeps its ``%-20g`` padding),
    the type the comment names (``DECIMAL(65,30)``, ``ENUM(1 byte)``, ...), its
    metadata and the comment's own NULL flag."""

    text: bytes
    type: str
    meta: int
    is_null: bool


@dataclass(frozen=True)
class PrintedChange:
    op: str                                  # "c", "u" or "d", as in the envelope
    db: str
    table: str
    before: dict[int, Printed] | None        # @N (1-based column ordinal) -> value
    after: dict[int, Printed] | None


_CONTROL = re.compile(rb"[\x00-\x1f]")
_OPS = {b"INSERT INTO": "c", b"UPDATE": "u", b"DELETE FROM": "d"}
_HEAD = re.compile(rb"^### (INSERT INTO|UPDATE|DELETE FROM) `(.*)`\.`(.*)`$")
# greedy value: the comment that ends the line is the last " /* ", even if the value
# itself holds that sequence
_VALUE = re.compile(rb"^###   @(\d+)=(.*) /\* (.+) meta=(\d+) nullable=\d+ is_null=([01]) \*/$")


def binlog_files(datadir: Path, first: str, last: str) -> list[Path]:
    """The binlog files from ``first`` to ``last`` inclusive (``name.000007`` style)."""
    stem, _, a = first.rpartition(".")
    stem_b, _, b = last.rpartition(".")
    if stem != stem_b:
        raise ValueError(f"{first} and {last} are not of one binlog")
    return [datadir / f"{stem}.{n:0{len(a)}d}" for n in range(int(a), int(b) + 1)]


def print_rows(files: list[Path], start_pos: int, stop_pos: int) -> bytes:
    """mariadb-binlog's row text from ``start_pos`` in the first file to ``stop_pos``
    (exclusive) in the last one."""
    cmd = [find_binary("mariadb-binlog"), "--base64-output=decode-rows", "-vv",
           f"--start-position={start_pos}", f"--stop-position={stop_pos}", *map(str, files)]
    out = subprocess.run(cmd, capture_output=True)
    if out.returncode != 0 or out.stderr.strip():
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n"
                           f"{out.stderr.decode(errors='replace')[-2000:]}")
    return out.stdout


def parse_rows(text: bytes) -> list[PrintedChange]:
    """Every row change in ``text``, in binlog order."""
    changes: list[PrintedChange] = []
    head = image = None
    images: dict[str, dict[int, Printed]] = {}

    def close():
        if head is not None:
            op, db, table = head
            changes.append(PrintedChange(op, db, table, images.get("WHERE"), images.get("SET")))

    for number, line in enumerate(text.split(b"\n"), 1):
        if not line.startswith(b"###"):
            close()
            head = image = None
            continue
        if m := _HEAD.match(line):
            close()
            head = (_OPS[m.group(1)], m.group(2).decode(), m.group(3).decode())
            image, images = None, {}
        elif line in (b"### WHERE", b"### SET") and head is not None:
            image = images.setdefault(line[4:].decode(), {})
        elif (m := _VALUE.match(line)) and image is not None:
            image[int(m.group(1))] = Printed(m.group(2), m.group(3).decode(), int(m.group(4)),
                                             m.group(5) == b"1")
        else:
            raise ValueError(f"mariadb-binlog output line {number} not understood: {line[:200]!r}")
    close()
    return changes


def quoted(raw: bytes) -> bytes:
    """``raw`` as mariadb-binlog prints a string: in single quotes, bytes below 0x20
    as ``\\xNN`` (lower-case hex), every other byte as itself."""
    return b"'" + _CONTROL.sub(lambda m: b"\\x%02x" % m.group()[0], raw) + b"'"
