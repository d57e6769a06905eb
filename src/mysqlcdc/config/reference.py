"""Render the config reference (``docs/CONFIG.md``) from the models' declarations.

    python -m mysqlcdc.config.reference > docs/CONFIG.md

Each model becomes a section (its docstring, then one table row per option: type
and limits, default, description), so the reference cannot drift from the code.
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from mysqlcdc.config.fields import TypeName
from mysqlcdc.config.models import SINK_TYPES, TRANSFORM_TYPES, PipelineConfig, models_in

__all__ = ["render", "EXAMPLE"]

EXAMPLE = """\
name: shop-cdc
source:
  host: 127.0.0.1
  port: 3306
  user: cdc
  password_env: MYSQLCDC_PASSWORD
  server_id: 5401
  start: earliest
  tables:
    include: ["shop.*"]
    exclude: ["shop.tmp_*"]
  max_events_per_batch: 10000
spark:
  master: "local[*]"
  trigger_interval: "1 second"
  checkpoint: ./state/checkpoint
  conf: {spark.sql.shuffle.partitions: 4}
sinks:
  - changelog:
      path: ./changelog
  - console:
      max_rows: 20
"""

_INTRO = """\
# Pipeline config reference

`mysqlcdc run PIPELINE.yaml` reads one YAML file describing one pipeline. This page is
generated from `src/mysqlcdc/config/models.py` by
`python -m mysqlcdc.config.reference > docs/CONFIG.md`; change the models, not this page.

```yaml
{example}```

Rules that hold everywhere:

- **Unknown keys are errors**, so a typo never passes silently; a key written twice is an
  error too. All problems in a file are reported at once, each as
  `FILE:LINE: dotted.path: message`.
- **Relative paths resolve against the YAML file's folder**, not the working directory.
  Storage locations (`spark.checkpoint`, sink paths) may also be URIs (`s3a://`, `hdfs://`,
  `file://`), kept as written.
- **The password is never written in the file.** `source.password_env` names an
  environment variable; it is read once when the file loads and never printed, logged or
  dumped (it shows as `***`).
- **Sinks** are a list of one-key mappings: the key (`changelog`, `console`, `kafka`) picks the sink
  type, the value holds its options (`- console:` alone takes every default).
- **Transforms** are written the same way (`- mask: {{columns: [shop.user.email]}}`), in the
  top-level `transforms` list (every sink) or in a sink's own `transforms` list (after the
  top-level ones); each transform type's options are listed once below, under the top level.
"""


def render() -> str:
    """The whole reference page as Markdown."""
    parts = [_INTRO.format(example=EXAMPLE)]
    for title, model in _sections(PipelineConfig, ""):
        parts.append(_section(title, model))
    return "\n".join(parts)


def _sections(model: type[BaseModel], path: str,
              seen: set | None = None) -> list[tuple[str, type[BaseModel]]]:
    """Depth-first ``(title, model)`` pairs, the top level first; a model met again (the
    transforms every sink accepts) is listed once, under its first path."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    found = [(path or "top level", model)]
    for name, field in model.model_fields.items():
        for child in models_in(field.annotation):
            found += _sections(child, _child_path(path, name, child), seen)
    return found


def _child_path(path: str, name: str, child: type[BaseModel]) -> str:
    dotted = f"{path}.{name}" if path else name
    tags = {**SINK_TYPES, **TRANSFORM_TYPES}
    tag = next((t for t, m in tags.items() if m is child), None)
    return f"{dotted}[].{tag}" if tag else dotted


def _section(title: str, model: type[BaseModel]) -> str:
    rows = [
        "| option | type | default | description |",
        "| --- | --- | --- | --- |",
        *(_row(f.alias or n, f) for n, f in model.model_fields.items() if not f.exclude),
    ]
    doc = " ".join((model.__doc__ or "").split())
    return f"## `{title}`\n\n{doc}\n\n" + "\n".join(rows) + "\n"


def _row(name: str, field: FieldInfo) -> str:
    cells = [f"`{name}`", _type_cell(field), _default(field), field.description or ""]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


# --- types -------------------------------------------------------------------

_SCALARS = {int: "int", float: "number", str: "string", bool: "bool", Path: "path"}


def _type_cell(field: FieldInfo) -> str:
    text = _named(field.metadata) or _type_name(field.annotation)
    limits = _limits(field.metadata)
    return f"{text} ({limits})" if limits else text


def _named(metadata: list[Any]) -> str | None:
    return next((m.name for m in metadata if isinstance(m, TypeName)), None)


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _named(list(args[1:])) or _type_name(args[0])
    if origin is Literal:
        return " | ".join(map(str, args))
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"mapping {_type_name(args[0])} → {_type_name(args[1])}"
    if args:  # a union
        return _union_name(args)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "mapping"
    return _SCALARS.get(tp, getattr(tp, "__name__", str(tp)))


def _union_name(args: tuple[Any, ...]) -> str:
    members = [a for a in args if a is not type(None)]
    if len(members) > 1 and all(isinstance(a, type) and issubclass(a, BaseModel) for a in members):
        if all(m in TRANSFORM_TYPES.values() for m in members):
            return "transform: " + " | ".join(TRANSFORM_TYPES)
        return "sink: " + " | ".join(SINK_TYPES)
    text = " | ".join(_type_name(a) for a in members)
    return f"{text} or null" if len(members) < len(args) else text


def _limits(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        for attr, fmt in (("ge", "≥ {}"), ("gt", "> {}"), ("le", "≤ {}"), ("lt", "< {}"),
                          ("min_length", "length ≥ {}"), ("pattern", "`{}`")):
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(fmt.format(value))
    return ", ".join(parts)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section below)"
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


if __name__ == "__main__":
    sys.stdout.write(render())
