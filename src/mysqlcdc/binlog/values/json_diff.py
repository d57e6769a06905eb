"""Apply MySQL partial-JSON diffs (PARTIAL_UPDATE_ROWS) to a decoded document.

A diff is ``(operation, path, value)``: REPLACE (0) an existing member or
element, INSERT (1) a new member or array element, REMOVE (2). Paths are
MySQL JSON paths as the server writes them: ``$``, ``.key``, ``."quoted key"``
and ``[n]`` legs.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ..reader import Reader
from .json_binary import decode_json

__all__ = ["apply_json_diffs", "parse_json_path", "JsonDiffError", "JsonDiffList",
           "read_json_diffs", "JSON_DIFF_TYPE", "DIFF_REPLACE", "DIFF_INSERT", "DIFF_REMOVE"]

DIFF_REPLACE, DIFF_INSERT, DIFF_REMOVE = 0, 1, 2

_LEG = re.compile(r'\s*(?:\.\s*(?:(?P<q>"(?:[^"\\]|\\.)*")|(?P<k>[^.\[\s]+))'
                  r'|\[\s*(?P<i>\d+|last(?:\s*-\s*\d+)?)\s*\])')


JSON_DIFF_TYPE = 1000  # pseudo column type: an after-image JSON value sent as diffs


class JsonDiffError(ValueError):
    """A diff that does not apply to the before image."""


class JsonDiffList:
    """The diffs of one partially updated JSON value, until applied to its before image."""

    __slots__ = ("diffs",)

    def __init__(self, diffs: list[tuple[int, str, Any]]) -> None:
        self.diffs = diffs


def read_json_diffs(raw: bytes) -> JsonDiffList:
    """Parse a diff vector: per diff an operation byte, packed path, packed JSON value."""
    r = Reader(raw)
    diffs = []
    while r.remaining():
        op = r.u8()
        path = r.take(r.packed()).decode("utf-8", "backslashreplace")
        value = decode_json(r.take(r.packed())) if op != DIFF_REMOVE else None
        diffs.append((op, path, value))
    return JsonDiffList(diffs)


def parse_json_path(path: str) -> list[str | int | tuple[str, int]]:
    """Legs of a path: member names (str), indexes (int) or ('last', minus)."""
    path = path.strip()
    if not path.startswith("$"):
        raise JsonDiffError(f"JSON path must start with $: {path!r}")
    legs: list[str | int | tuple[str, int]] = []
    pos = 1
    while pos < len(path):
        m = _LEG.match(path, pos)
        if m is None:
            raise JsonDiffError(f"cannot parse JSON path {path!r} at {pos}")
        if m.group("q") is not None:
            legs.append(json.loads(m.group("q")))
        elif m.group("k") is not None:
            legs.append(m.group("k"))
        else:
            idx = m.group("i")
            legs.append(int(idx) if idx.isdigit() else ("last", int(idx[4:].replace("-", "").strip() or 0)))
        pos = m.end()
    return legs


def _index(container: list, leg: Any) -> int:
    if isinstance(leg, tuple):
        return len(container) - 1 - leg[1]
    return leg


def _step(node: Any, leg: Any) -> Any:
    if isinstance(leg, str):
        if not isinstance(node, dict) or leg not in node:
            raise JsonDiffError(f"JSON path member {leg!r} not found")
        return node[leg]
    if not isinstance(node, list):
        if _index([node], leg) == 0:   # MySQL auto-wraps a scalar as a 1-element array
            return node
        raise JsonDiffError("JSON path index on a non-array")
    i = _index(node, leg)
    if not 0 <= i < len(node):
        raise JsonDiffError("JSON path index out of range")
    return node[i]


def _apply_one(doc: Any, op: int, legs: list, value: Any) -> Any:
    if not legs:
        if op == DIFF_REPLACE:
            return value
        raise JsonDiffError("cannot insert or remove the JSON document root")
    parent = doc
    for leg in legs[:-1]:
        parent = _step(parent, leg)
    last = legs[-1]
    if isinstance(parent, dict) and isinstance(last, str):
        if op == DIFF_REMOVE:
            parent.pop(last, None)
        elif op == DIFF_REPLACE and last not in parent:
            raise JsonDiffError(f"JSON member {last!r} to replace not found")
        else:
            parent[last] = value
        return doc
    if isinstance(parent, list) and not isinstance(last, str):
        i = _index(parent, last)
        if op == DIFF_INSERT:
            parent.insert(max(i, 0), value)
        elif not 0 <= i < len(parent):
            raise JsonDiffError("JSON array index out of range")
        elif op == DIFF_REPLACE:
            parent[i] = value
        else:
            del parent[i]
        return doc
    raise JsonDiffError("JSON diff path does not match the document shape")


def apply_json_diffs(before: Any, diffs: list[tuple[int, str, Any]]) -> Any:
    """The after image: ``before`` (left untouched) with every diff applied in order."""
    doc = copy.deepcopy(before)
    for op, path, value in diffs:
        if op not in (DIFF_REPLACE, DIFF_INSERT, DIFF_REMOVE):
            raise JsonDiffError(f"unknown JSON diff operation {op}")
        doc = _apply_one(doc, op, parse_json_path(path), value)
    return doc
