"""The config's transforms, helpers and plugins -> objects the queries run.

Everything user code needs is checked on the driver before any query starts (each
module imports, each function exists), so a typo stops the run at once with a
ConfigError naming the config path, not inside a Spark task minutes later.
"""

from __future__ import annotations

from pathlib import Path

from mysqlcdc.config.models import PipelineConfig, PluginsSinkConfig
from mysqlcdc.errors import ConfigError
from mysqlcdc.transforms.api import Transform
from mysqlcdc.transforms.builtins import (ARROW_TYPES, AddField, DropColumns, Filter, Hash, Mask,
                                          Rename, Route, Truncate)
from mysqlcdc.transforms.chain import Chain
from mysqlcdc.transforms.flatten import Flatten, Join
from mysqlcdc.transforms.helpers import Helpers
from mysqlcdc.transforms.loader import add_search_paths, resolve, ship_files, split_path
from mysqlcdc.transforms.outbox import Outbox
from mysqlcdc.transforms.python import PythonTransform

__all__ = ["build_transform", "sink_chain", "has_ordered", "user_modules", "check_user_code", "helpers_of",
           "plugin_classes"]


def build_transform(model, label: str) -> Transform:
    """One transform from its config model."""
    kind = model.type
    if kind == "mask":
        t: Transform = Mask(model.columns, stars=model.stars, keep_last=model.keep_last,
                            char=model.char)
    elif kind == "hash":
        t = Hash(model.columns, salt=model.salt())
    elif kind == "truncate":
        t = Truncate(model.columns, model.length)
    elif kind == "drop_columns":
        t = DropColumns(model.columns)
    elif kind == "rename":
        t = Rename(model.columns)
    elif kind == "filter":
        t = Filter(model.tables, model.ops, keep=model.keep, drop=model.drop)
    elif kind == "route":
        t = Route(template=model.template, field=model.field, column=model.column,
                  tables=model.tables)
    elif kind == "add_field":
        t = AddField(model.name, value=model.value, expression=model.expression,
                     target=model.target, type=model.column_type, tables=model.tables)
    elif kind == "python":
        t = PythonTransform(model.function, model.batch_function, on_error=model.on_error,
                            columns={n: ARROW_TYPES[c] for n, c in model.columns.items()},
                            typed=model.typed_values, ops=tuple(model.ops))
    elif kind == "outbox":
        t = Outbox(model.table, id=model.id, aggregate_type=model.aggregate_type,
                   aggregate_id=model.aggregate_id, event_type=model.event_type,
                   payload=model.payload, topic=model.topic,
                   include_snapshot=model.include_snapshot, on_error=model.on_error)
    elif kind == "flatten":
        joins = [Join(j.column, j.table, j.key, j.as_ or j.table.split(".", 1)[1])
                 for j in model.joins]
        t = Flatten(model.table, joins, reemit=model.reemit,
                    keep_referenced=model.keep_referenced)
    else:   # pragma: no cover - the config model admits only known transforms
        raise ConfigError(f"transform {kind!r} is not supported by this version")
    t.label = label
    return t


def _labelled(cfg: PipelineConfig, index: int) -> list[tuple[str, object]]:
    sink = cfg.sinks[index]
    out = [(f"transforms[{i}] ({m.type})", m) for i, m in enumerate(cfg.transforms)]
    out += [(f"sinks[{index}].{sink.type}.transforms[{i}] ({m.type})", m)
            for i, m in enumerate(sink.transforms)]
    return out


def sink_chain(cfg: PipelineConfig, index: int, *, history_dir: str | None,
               checkpoint_dir: Path | None, dead_letters=None) -> Chain:
    """The chain of sink ``index``: the pipeline's transforms, then the sink's own."""
    transforms = [build_transform(m, label) for label, m in _labelled(cfg, index)]
    state_dir = str(checkpoint_dir / "transforms") if checkpoint_dir is not None else None
    if state_dir is None and any(t.ordered for t in transforms):
        name = next(t.describe() for t in transforms if t.ordered)
        raise ConfigError(f"{name} keeps state beside the checkpoint: spark.checkpoint must be "
                          "a local folder (or a mount every executor sees)")
    return Chain(transforms=transforms, pipeline=cfg.name,
                 sink=f"{index}-{cfg.sinks[index].type}", history_dir=history_dir,
                 state_dir=state_dir, helpers=tuple(cfg.helpers), dead_letters=dead_letters)


def has_ordered(cfg: PipelineConfig, index: int) -> bool:
    """Whether sink ``index``'s transforms include an ordered one, which must see the whole
    micro-batch in one task after the read tasks."""
    return any(build_transform(m, label).ordered for label, m in _labelled(cfg, index))


def user_modules(cfg: PipelineConfig) -> list[str]:
    """The modules of python transforms and helpers (what executors must import)."""
    models = list(cfg.transforms) + [t for s in cfg.sinks for t in s.transforms]
    found = [split_path(m.function or m.batch_function)[0] for m in models if m.type == "python"]
    return list(dict.fromkeys(found + list(cfg.helpers)))


def check_user_code(cfg: PipelineConfig) -> list[str]:
    """Import every user function, helper module and plugin class on the driver (a
    ConfigError for the first that fails); returns the files to ship to executors."""
    add_search_paths(str(p) for p in cfg.transforms_path)
    models = list(cfg.transforms) + [t for s in cfg.sinks for t in s.transforms]
    for m in models:
        if m.type == "python":
            fn = resolve(m.function or m.batch_function, "python transform")
            if not callable(fn):
                raise ConfigError(f"python transform {m.function or m.batch_function!r} is "
                                  "not a function")
    helpers_of(cfg)
    for sink in cfg.sinks:
        if isinstance(sink, PluginsSinkConfig):
            plugin_classes(sink)
    return ship_files(user_modules(cfg))


def helpers_of(cfg: PipelineConfig) -> Helpers:
    add_search_paths(str(p) for p in cfg.transforms_path)
    return Helpers.build(cfg.helpers)


def plugin_classes(sink: PluginsSinkConfig) -> tuple[tuple[str, type], ...]:
    out = []
    for path in sink.plugins:
        cls = resolve(path, "plugin")
        if not isinstance(cls, type):
            raise ConfigError(f"plugin {path!r} is not a class",
                              hint="List plugin classes; each is instantiated once per run.")
        out.append((path, cls))
    return tuple(out)
