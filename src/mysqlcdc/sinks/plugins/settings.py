"""Typed settings of the plugins sink: the plugin classes (already imported) and context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PluginsSettings"]


@dataclass(frozen=True)
class PluginsSettings:
    """``classes``: (config path, class) in call order; ``state_dir``: a local folder for
    the transaction counters; ``history_dir``: the query's schema history (typed rows)."""

    classes: tuple[tuple[str, type], ...]
    state_dir: str
    history_dir: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    pipeline: str = "mysqlcdc"
    config: Any = None
    helpers: Any = None
