"""Corpus location and decoding helpers shared by the corpus tests."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from mysqlcdc.binlog.events import Event
from mysqlcdc.binlog.file import iter_binlog_bytes
from mysqlcdc.binlog.parser import BinlogParser

CORPUS = Path(os.environ.get("MYSQLCDC_CORPUS")
              or Path(__file__).resolve().parents[2] / "../shared/corpus/binlogs").resolve()

_SECTION = re.compile(r"^## `([^`]+)/`")
_ROW = re.compile(r"^\| `([^`]+)` \|")


def manifest_files() -> list[str]:
    """Every binlog file listed in MANIFEST.md's per-origin tables (relative paths)."""
    manifest = CORPUS / "MANIFEST.md"
    if not manifest.exists():
        return []
    out, folder = [], None
    for line in manifest.read_text(encoding="utf-8").splitlines():
        m = _SECTION.match(line)
        if m:
            folder = m.group(1)
            continue
        m = _ROW.match(line)
        if m and folder and not m.group(1).startswith(("file", "mariadb-server-10.11-testdata/")):
            out.append(f"{folder}/{m.group(1)}")
    return out


def read_binlog(rel: str) -> bytes:
    data = (CORPUS / rel).read_bytes()
    return gzip.decompress(data) if rel.endswith(".gz") else data


def decode(rel: str, **parser_args) -> list[tuple[int, Event]]:
    """All events of a corpus file as (position of the raw event, event)."""
    parser = BinlogParser(file=Path(rel).name, **parser_args)
    out = []
    for pos, raw in iter_binlog_bytes(read_binlog(rel), Path(rel).name):
        out.extend((pos, ev) for ev in parser.parse(raw, pos))
    return out
