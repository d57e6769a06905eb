"""Typed settings of the changelog_table sink: a mirror connection plus the table suffix."""

from __future__ import annotations

from dataclasses import dataclass

from mysqlcdc.sinks.mirror.settings import MirrorSettings

__all__ = ["ChangelogTableSettings", "from_sink_config"]


@dataclass(frozen=True)
class ChangelogTableSettings:
    target: MirrorSettings
    suffix: str = "_changelog"

    @property
    def ledger_name(self) -> str:
        """The sink's row in ``mysqlcdc_offsets`` (apart from a mirror of the same pipeline)."""
        return f"{self.target.pipeline}#changelog"


def from_sink_config(sink, pipeline: str, history_dir: str | None) -> ChangelogTableSettings:
    from mysqlcdc.sinks.mirror.settings import from_sink_config as mirror_settings

    return ChangelogTableSettings(mirror_settings(sink, pipeline, history_dir),
                                  suffix=sink.table_suffix)
