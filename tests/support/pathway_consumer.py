"""Rebuild tables from Debezium topics with Pathway's own reader (``pw.io.debezium.read``).

Pathway runs in a subprocess (its engine runs until killed), reading each topic into a
table and writing the table's changes as JSON lines; the current rows are the sum of
those changes. The Pathway schemas come from the Connect schemas our messages carry.

Pathway's limitations met on the way, shown by reproductions, not worked around in our
output:

* A Kafka tombstone (a message with a key and no value) is logged as
  ``Parse error: received message doesn't have payload`` and skipped: Pathway's parser
  treats only a JSON ``null`` value as a tombstone. Reproduction::

      producer.produce("t", key=b'{"schema":{...},"payload":{"id":1}}', value=None)
      # pathway log: ERROR:Parse error: received message doesn't have payload

  The delete before it already removed the row, so the rebuilt table is right.
* ``op = "t"`` (TRUNCATE) is rejected (``unknown debezium operation``): the workload read
  through Pathway truncates nothing.
* A NULL column value fails the whole message: the reader parses every field with type
  ``Any`` (not optional), whatever the Pathway schema says, and ``Any`` takes no JSON
  ``null``. Reproduction: a create whose ``after`` is ``{"id": 1, "v": null}``::

      ERROR:Parse error: failed to create a field "v" with type Any from json payload: null

  So Pathway reads tables whose columns are NOT NULL.
* A field whose value is a JSON object (a Connect struct: Debezium's Geometry and Point)
  fails the whole message: the reader parses every field with type ``Any``, which takes
  no objects, whatever the Pathway schema says. Reproduction, a create whose ``after`` is
  ``{"id": 1, "g": {"wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA", "srid": 4326}}`` read with
  ``g: pw.Json``::

      ERROR:Parse error: failed to create a field "g" with type Any from json payload:
      {"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA","srid":4326}

  Struct fields are left out of the Pathway schemas (the reader then skips them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from tests.support.kafka import read_topic

__all__ = ["run_pathway", "pathway_columns"]

_TYPES = {"int8": "int", "int16": "int", "int32": "int", "int64": "int", "float": "float",
          "double": "float", "string": "str", "boolean": "bool", "bytes": "str"}


def pathway_columns(bootstrap: str, topic: str) -> list[tuple[str, str, bool]]:
    """(name, pathway type, is key) of a Debezium topic's table, from its first message;
    struct fields are left out (see above)."""
    for msgs in read_topic(bootstrap, topic).values():
        for m in msgs:
            if m.value() is None:
                continue
            value, key = json.loads(m.value()), json.loads(m.key())
            after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
            keys = {f["field"] for f in key["schema"]["fields"]}
            return [(f["field"], _TYPES[f["type"]], f["field"] in keys)
                    for f in after["fields"] if f["type"] in _TYPES]
    raise AssertionError(f"no message in {topic}")


def _job(bootstrap: str, topics: dict[str, str], columns: dict, out: Path) -> str:
    lines = ["import pathway as pw", ""]
    settings = {"bootstrap.servers": bootstrap, "group.id": f"pathway-{os.getpid()}",
                "auto.offset.reset": "earliest", "session.timeout.ms": "6000",
                "heartbeat.interval.ms": "500", "fetch.wait.max.ms": "50"}
    for table, topic in topics.items():
        cols = ", ".join(
            f"{name!r}: pw.column_definition(dtype={typ} | None, primary_key={key})"
            for name, typ, key in columns[table])
        lines += [
            f"s_{table} = pw.schema_builder({{{cols}}})",
            f"t_{table} = pw.io.debezium.read({settings!r}, topic_name={topic!r}, "
            f"schema=s_{table}, autocommit_duration_ms=100)",
            f"pw.io.jsonlines.write(t_{table}, {str(out / (table + '.jsonl'))!r})",
        ]
    lines.append("pw.run(monitoring_level=pw.MonitoringLevel.NONE)")
    return "\n".join(lines) + "\n"


def _state(path: Path) -> list[dict]:
    """Current rows: every row's changes summed (``diff`` +1/-1)."""
    if not path.exists():
        return []
    counts: Counter = Counter()
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            diff = row.pop("diff")
            row.pop("time", None)
            counts[json.dumps(row, sort_keys=True)] += diff
    assert all(n in (0, 1) for n in counts.values()), counts
    return [json.loads(r) for r, n in counts.items() if n == 1]


def run_pathway(bootstrap: str, topics: dict[str, str], workdir: Path,
                expected: dict[str, int] | None = None, quiet_s: float = 4.0,
                timeout_s: float = 180.0) -> dict[str, list[dict]]:
    """Each table's rows as Pathway rebuilt them from ``topics`` ({table: topic}).

    Stops once every output has been still for ``quiet_s`` (and, when given, holds the
    ``expected`` number of rows)."""
    workdir.mkdir(parents=True, exist_ok=True)
    columns = {t: pathway_columns(bootstrap, topic) for t, topic in topics.items()}
    script = workdir / "job.py"
    script.write_text(_job(bootstrap, topics, columns, workdir))
    log = open(workdir / "pathway.log", "wb")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        _wait(proc, [workdir / f"{t}.jsonl" for t in topics], workdir, expected, quiet_s,
              timeout_s)
    finally:
        proc.kill()
        proc.wait()
        log.close()
    return {t: _state(workdir / f"{t}.jsonl") for t in topics}


def _wait(proc, outputs: list[Path], workdir: Path, expected, quiet_s: float,
          timeout_s: float) -> None:
    deadline, last, still_since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("pathway exited:\n" + textwrap.shorten(
                (workdir / "pathway.log").read_text(errors="replace")[-4000:], 4000))
        sizes = [p.stat().st_size if p.exists() else -1 for p in outputs]
        if sizes != last:
            last, still_since = sizes, time.monotonic()
        ready = all(s > 0 for s in sizes) and (
            expected is None or all(len(_state(p)) == expected[p.stem] for p in outputs))
        if ready and time.monotonic() - still_since >= quiet_s:
            return
        time.sleep(0.5)
    errors = [line for line in (workdir / "pathway.log").read_text(errors="replace").splitlines()
              if "INFO" not in line and "doesn't have payload" not in line]
    raise AssertionError(f"pathway did not rebuild the tables in {timeout_s:.0f} s: "
                         + " | ".join(dict.fromkeys(e[:300] for e in errors[-50:])))
