"""Load a pipeline config file into a :class:`~mysqlcdc.config.models.PipelineConfig`.

Every mistake in a file becomes one :class:`~mysqlcdc.errors.ConfigError` that lists
each problem with the file and line of the offending key (or of its parent mapping
when the key is missing)::

    [CONFIG_INVALID] pipeline.yaml has 2 problems:
      pipeline.yaml:1: soruce: unknown option (did you mean 'source'?)
      pipeline.yaml:9: source.port: Input should be a valid integer, ... (got 'abc')

The error also carries the problems as ``err.problems`` (a tuple of
:class:`ConfigProblem`). No error text ever contains the password: it is read from
the environment, never from the file, and rejected keys never echo their values.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from mysqlcdc.config.models import SINK_TYPES, TRANSFORM_TYPES, PipelineConfig, models_in
from mysqlcdc.errors import ConfigError

__all__ = ["load_pipeline", "load_pipeline_from_dict", "ConfigProblem"]

Loc = tuple[int | str, ...]

# Errors whose message already names what was wrong (see models.py).
_NAMES_ITS_INPUT = frozenset({"env_var_missing", "sink_type", "sink_options", "transform_type",
                              "transform_options", "transform_shape", "expression", "template"})
_SECRET_NAME = re.compile(r"password|passwd|secret|token|credential", re.IGNORECASE)


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake: where it is (``file``/``line`` are None for dict input) and what."""

    file: str | None
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = ":".join(str(p) for p in (self.file, self.line) if p is not None)
        return f"{where}: {self.path}: {self.message}" if where else f"{self.path}: {self.message}"


# --- public ------------------------------------------------------------------


def load_pipeline(path: str | Path, *, env: Mapping[str, str] | None = None) -> PipelineConfig:
    """Read, parse and validate the pipeline config file at ``path``.

    Relative paths in it resolve against the file's folder. The password is read
    from ``env`` (default ``os.environ``). Raises :class:`ConfigError` on any mistake.

    >>> cfg = load_pipeline("pipeline.yaml", env={"MYSQLCDC_PASSWORD": "s3cret"})  # doctest: +SKIP
    """
    file = str(path)
    node, data = _parse_yaml(_read_text(Path(path)), file)
    lines = _index_lines(node, file)
    base_dir = Path(os.path.abspath(path)).parent
    return _validate(data, base_dir=base_dir, env=env, file=file, lines=lines)


def load_pipeline_from_dict(
    data: Any,
    *,
    base_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> PipelineConfig:
    """Validate an already-parsed config (a dict shaped like the YAML file).

    Relative paths resolve against ``base_dir`` (default: the cwd); the password is
    read from ``env`` (default ``os.environ``). Raises :class:`ConfigError`.
    """
    base = Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd()))
    return _validate(data, base_dir=base, env=env, file=None, lines={})


# --- reading -----------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{path}: cannot read the pipeline config: {reason}") from exc


def _parse_yaml(text: str, file: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for line numbers) and its plain data."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_message(exc, file)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {type(exc).__name__}") from None
    finally:
        loader.dispose()


def _yaml_message(exc: yaml.MarkedYAMLError, file: str) -> str:
    """Problem and line only: the excerpt PyYAML adds could show a secret."""
    mark = exc.problem_mark or exc.context_mark
    line = f":{mark.line + 1}" if mark is not None else ""
    what = "; ".join(p for p in (exc.context, exc.problem) if p)
    return f"{file}{line}: YAML syntax error: {what or 'cannot parse'}"


def _index_lines(root: yaml.Node | None, file: str) -> dict[Loc, int]:
    """Line (1-based) of every key and list item, by its path; ``()`` is the document.

    A key written twice in one mapping is an error (YAML would keep the last silently).
    """
    lines: dict[Loc, int] = {}
    if root is None:
        return lines
    lines[()] = root.start_mark.line + 1
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    duplicates: list[ConfigProblem] = []
    while stack:
        node, loc = stack.pop()
        for child_loc, mark_node, child in _children(node, loc):
            line = mark_node.start_mark.line + 1
            if child_loc in lines:
                duplicates.append(_duplicate(child_loc, file, line, lines[child_loc]))
            elif len(child_loc) <= 64:  # deeper only through alias loops
                lines[child_loc] = line
                stack.append((child, child_loc))
    if duplicates:
        raise _config_error(duplicates, file)
    return lines


def _duplicate(loc: Loc, file: str, line: int, first: int) -> ConfigProblem:
    return ConfigProblem(file, line, _dotted(loc), f"duplicate key (first written on line {first})")


def _children(node: yaml.Node, loc: Loc) -> list[tuple[Loc, yaml.Node, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        return [
            ((*loc, key.value), key, value)
            for key, value in node.value
            if isinstance(key, yaml.ScalarNode)
        ]
    if isinstance(node, yaml.SequenceNode):
        return [((*loc, i), item, item) for i, item in enumerate(node.value)]
    return []


# --- validating --------------------------------------------------------------


def _validate(
    data: Any,
    *,
    base_dir: Path,
    env: Mapping[str, str] | None,
    file: str | None,
    lines: Mapping[Loc, int],
) -> PipelineConfig:
    if data is None:
        where = f"{file}:1: " if file else ""
        raise ConfigError(f"{where}the config is empty; expected name, source, spark and sinks")
    context = {"base_dir": base_dir, "env": os.environ if env is None else env}
    try:
        return PipelineConfig.model_validate(data, context=context)
    except ValidationError as exc:
        errors = _without_typo_echoes(exc.errors(include_url=False))
        problems = [_problem(err, file, lines) for err in errors]
        raise _config_error(problems, file) from None


def _without_typo_echoes(errors: list[ErrorDetails]) -> list[ErrorDetails]:
    """Drop "x is missing" when an unknown key next to it is a typo of x (``soruce``)."""
    meant = {
        (*loc[:-1], name)
        for err in errors
        if err["type"] == "extra_forbidden"
        and (name := _suggestion(loc := tuple(err["loc"]))) is not None
    }
    return [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) in meant)]


def _config_error(problems: list[ConfigProblem], file: str | None) -> ConfigError:
    problems.sort(key=lambda p: (p.line or 0, p.path))
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    header = f"{file} has {count}:" if file else f"the pipeline config has {count}:"
    error = ConfigError("\n  ".join([header, *map(str, problems)]))
    error.problems = tuple(problems)  # type: ignore[attr-defined]
    return error


def _problem(err: ErrorDetails, file: str | None, lines: Mapping[Loc, int]) -> ConfigProblem:
    loc: Loc = tuple(err["loc"])
    return ConfigProblem(file, _line_of(loc, lines) if file else None, _dotted(loc), _message(err))


def _dotted(loc: Loc) -> str:
    return ".".join(map(str, loc)) or "(top level)"


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int:
    """The line of ``loc``, or of its nearest ancestor the file has (a missing key)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _message(err: ErrorDetails) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        return _unknown_option(loc)
    if err["type"] == "missing":
        return "required option is missing"
    if err["type"] in _NAMES_ITS_INPUT:
        return err["msg"]
    return f"{err['msg']}{_got(err.get('input'), loc)}"


def _got(value: Any, loc: Loc) -> str:
    """`` (got 'abc')`` for a rejected value; masked where the key names a secret."""
    if any(_SECRET_NAME.search(str(p)) and not str(p).endswith("_env") for p in loc):
        return " (got ***)"
    if isinstance(value, Mapping):
        return " (got a mapping)"
    if isinstance(value, (list, tuple)):
        return " (got a list)"
    shown = repr(value)
    return f" (got {shown[:60] + '...' if len(shown) > 60 else shown})"


def _unknown_option(loc: Loc) -> str:
    key = str(loc[-1])
    options = _options_at(loc[:-1])
    if key.lower() == "password":
        return (
            "unknown option: never write the password in the file; "
            "name its variable in password_env"
        )
    close = _suggestion(loc)
    if close is not None:
        return f"unknown option (did you mean '{close}'?)"
    return f"unknown option; expected one of: {', '.join(options)}" if options else "unknown option"


def _suggestion(loc: Loc) -> str | None:
    """The option an unknown key at ``loc`` most likely meant, if one is close."""
    close = difflib.get_close_matches(str(loc[-1]), _options_at(loc[:-1]), n=1, cutoff=0.6)
    return close[0] if close else None


def _options_at(loc: Loc) -> list[str]:
    """The option names the models accept at ``loc`` (``()`` is the top level)."""
    models: list[type[BaseModel]] = [PipelineConfig]
    for part in loc:
        if isinstance(part, int):
            continue
        models = [m for model in models for m in _descend(model, part)]
    return sorted({f.alias or n for m in models for n, f in m.model_fields.items() if not f.exclude})


def _descend(model: type[BaseModel], part: str) -> list[type[BaseModel]]:
    if SINK_TYPES.get(part) is model or TRANSFORM_TYPES.get(part) is model:
        return [model]                 # the tag of a sink or transform: sinks.0.changelog
    field = model.model_fields.get(part)
    return models_in(field.annotation) if field is not None else []

