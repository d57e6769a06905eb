"""Validated value types the config models are built from.

Each type validates itself where it is declared, so a model field reads as
``checkpoint: StoragePath`` and its rules live here once. Validators that need
the file being loaded read the pydantic *validation context*:

``base_dir``  folder relative paths resolve against (the YAML file's folder)
``env``       mapping environment variables are read from
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, PlainValidator
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationInfo
from pydantic_core import PydanticCustomError

from mysqlcdc.gtidset import GtidSet
from mysqlcdc.types import BinlogPosition, StartTimestamp, parse_start

__all__ = [
    "StartFrom",
    "StoragePath",
    "LocalPath",
    "TablePattern",
    "TriggerInterval",
    "SparkMaster",
    "standalone_addresses",
    "Duration",
    "Every",
    "duration_seconds",
    "parse_every",
    "SparkConfValue",
    "EnvVarName",
    "TypeName",
    "StrictModel",
    "one_key_unwrapper",
    "check_env_names",
    "secrets_from_env",
    "context_base_dir",
    "context_env",
]

class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class TypeName:
    """How the reference docs name a type (``Annotated`` metadata; pydantic ignores it)."""

    name: str


# --- context -----------------------------------------------------------------


def context_base_dir(info: ValidationInfo) -> Path:
    """The folder relative paths resolve against: ``base_dir`` in the context, else the cwd."""
    base = (info.context or {}).get("base_dir")
    return Path(base) if base is not None else Path.cwd()


def context_env(info: ValidationInfo) -> Any:
    """The environment to read variables from: ``env`` in the context, else ``os.environ``."""
    env = (info.context or {}).get("env")
    return os.environ if env is None else env


# --- start position ----------------------------------------------------------


def _parse_start(value: object):
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        if kind in ("gtid", "timestamp", "position"):
            value = inner           # {gtid: ...}, {timestamp: ...}, {position: FILE:POS}
    try:
        return parse_start(value)
    except ValueError:
        raise PydanticCustomError(
            "start_position",
            "expected earliest, latest, FILE:POS such as mariadb-bin.000003:4, a GTID set "
            "such as 0-1-100 or 3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5, or a timestamp such "
            "as 2026-11-01T12:00:00Z",
        ) from None


StartFrom = Annotated[
    Union[Literal["earliest", "latest"], BinlogPosition, GtidSet, StartTimestamp],
    PlainValidator(_parse_start),
    PlainSerializer(str),
    TypeName("earliest | latest | FILE:POS | GTID set | timestamp"),
]
"""``earliest``, ``latest``, a :class:`~mysqlcdc.types.BinlogPosition` written ``FILE:POS``,
a GTID set (:class:`~mysqlcdc.gtidset.GtidSet`) or a :class:`~mysqlcdc.types.StartTimestamp`."""

# --- paths -------------------------------------------------------------------

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _absolute(path: Path, info: ValidationInfo) -> Path:
    return Path(os.path.abspath(context_base_dir(info) / path.expanduser()))


def _storage_path(value: str, info: ValidationInfo) -> str:
    if not value.strip():
        raise PydanticCustomError("path_empty", "a path must not be empty")
    if _URI.match(value):
        return value
    return str(_absolute(Path(value), info))


StoragePath = Annotated[str, AfterValidator(_storage_path), TypeName("path or URI")]
"""A Spark storage location: a URI (``s3a://``, ``hdfs://``, ``file://``) kept as written,
or a local path made absolute against the YAML file's folder."""

LocalPath = Annotated[Path, AfterValidator(_absolute), TypeName("path")]
"""A local file, made absolute against the YAML file's folder."""

# --- table patterns ----------------------------------------------------------

_BAD_PATTERN_CHARS = re.compile(r"[\s`/\\]")


def _table_pattern(value: str) -> str:
    db, dot, table = value.partition(".")
    if not dot or not db or not table or "." in table or _BAD_PATTERN_CHARS.search(value):
        raise PydanticCustomError(
            "table_pattern",
            "expected a db.table glob such as shop.* or shop.order_? "
            "(one dot; * ? [...] match within a name)",
        )
    return value


TablePattern = Annotated[str, AfterValidator(_table_pattern), TypeName("db.table glob")]
"""``db.table`` where each side is an fnmatch glob (``*``, ``?``, ``[...]``)."""

# --- spark -------------------------------------------------------------------

_INTERVAL = re.compile(
    r"^(interval\s+)?\d+(\.\d+)?\s+"
    r"(microsecond|millisecond|second|minute|hour|day)s?$",
    re.IGNORECASE,
)


def _trigger_interval(value: str) -> str:
    if not _INTERVAL.match(value.strip()):
        raise PydanticCustomError(
            "trigger_interval",
            "expected a number and a unit such as '1 second', '500 milliseconds' or '2 minutes'",
        )
    return value.strip()


TriggerInterval = Annotated[str, AfterValidator(_trigger_interval), TypeName("interval")]
"""A Spark processing-time interval: ``'1 second'``, ``'500 milliseconds'``, ``'2 minutes'``."""


def standalone_addresses(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each master a ``spark://h1:p1,h2:p2`` URL names (a standby
    list has several); empty for any other master. ValueError for an address that is not
    ``host:port``."""
    if not master.startswith("spark://"):
        return []
    out = []
    for address in master[len("spark://"):].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{address!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out


def _spark_master(value: str) -> str:
    try:
        standalone_addresses(value)
    except ValueError as exc:
        raise PydanticCustomError("spark_master", "spark:// must be followed by host:port, "
                                  "several comma-separated ({problem})",
                                  {"problem": str(exc)}) from None
    return value


SparkMaster = Annotated[str, StringConstraints(min_length=1), AfterValidator(_spark_master),
                        TypeName("master URL")]
"""A Spark master URL; a standalone one (``spark://``) names ``host:port`` for each master."""


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration_seconds(text: str) -> float:
    """``'30d'`` -> 2592000.0; units ms, s, m, h, d, w."""
    found = _DURATION.match(str(text).strip())
    if not found:
        raise ValueError(f"not a duration: {text!r}")
    return float(found.group(1)) * _UNIT_S[found.group(2).lower()]


def _duration(value: object) -> object:
    text = str(value).strip() if isinstance(value, (str, int, float)) else value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value}s"
    if not isinstance(text, str) or not _DURATION.match(text):
        raise PydanticCustomError(
            "duration", "expected a number and a unit such as '30d', '12h', '10m' or '45s'")
    return text


Duration = Annotated[str, BeforeValidator(_duration), TypeName("duration")]
"""A length of time: ``'30d'``, ``'12h'``, ``'10m'``, ``'45s'`` (a bare number is seconds)."""


def parse_every(text: str) -> tuple[int | None, float | None]:
    """``'20'`` -> (20 batches, None); ``'10m'`` -> (None, 600.0 seconds)."""
    if str(text).isdigit():
        return int(text), None
    return None, duration_seconds(text)


def _every(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise PydanticCustomError("every", "a number of batches must be at least 1")
        return str(value)
    if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
        return value.strip()
    if isinstance(value, str) and _DURATION.match(value.strip()):
        return value.strip()
    raise PydanticCustomError(
        "every", "expected a number of micro-batches (such as 100) or a duration such as '10m'")


Every = Annotated[str, BeforeValidator(_every), TypeName("batches or duration")]
"""How often: a number of micro-batches (``100``) or a duration (``'10m'``)."""


def _scalar_to_str(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


SparkConfValue = Annotated[str, BeforeValidator(_scalar_to_str), TypeName("string")]
"""A Spark conf value; YAML numbers and booleans become the strings Spark expects."""

# --- environment -------------------------------------------------------------

EnvVarName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"), TypeName("env var name")
]
"""The name of an environment variable, such as ``MYSQLCDC_PASSWORD``."""


# --- one-key mappings (sinks, transforms) ---------------------------------------


def one_key_unwrapper(types: dict[str, type], noun: str, example: str):
    """The before-validator of a tagged union written as one-key mappings:
    ``{"changelog": {...}}`` -> ``{"type": "changelog", ...}``. Error codes are
    ``<noun>_shape``, ``<noun>_type`` and ``<noun>_options``."""
    def unwrap(value: object) -> object:
        if isinstance(value, tuple(types.values())):
            return value
        if not isinstance(value, dict) or len(value) != 1:
            raise PydanticCustomError(
                f"{noun}_shape", "each {noun} is a one-key mapping such as `{example}`",
                {"noun": noun, "example": example})
        ((kind, options),) = value.items()
        if kind not in types:
            raise PydanticCustomError(
                f"{noun}_type", "unknown {noun} type '{kind}'; expected one of: {known}",
                {"noun": noun, "kind": kind, "known": ", ".join(types)})
        options = {} if options is None else options
        if not isinstance(options, dict) or "type" in options:
            raise PydanticCustomError(
                f"{noun}_options", "the options of {noun} '{kind}' must be a mapping of its "
                "options", {"noun": noun, "kind": kind})
        return {**options, "type": kind}
    return unwrap


# --- secrets named by environment variables -------------------------------------


def check_env_names(names: dict[str, str], info: ValidationInfo) -> dict[str, str]:
    """A ``setting -> variable name`` mapping whose every variable is set, or an error."""
    missing = sorted(n for n in names.values() if n not in context_env(info))
    if missing:
        raise PydanticCustomError("env_var_missing", "environment variable(s) {names} not set",
                                  {"names": ", ".join(missing)})
    return names


def secrets_from_env(names: dict[str, str], info: ValidationInfo) -> dict:
    """``setting -> Secret`` read from the variables ``names`` maps the settings to."""
    from mysqlcdc.config.secret import Secret

    env = context_env(info)
    return {k: Secret(env[v]) for k, v in names.items()}
