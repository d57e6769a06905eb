"""Typed settings of the dead-letter sink, built from its config model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["DeadLetterSettings", "from_config"]


@dataclass(frozen=True)
class DeadLetterSettings:
    """A Parquet folder (``path``) or a Kafka topic (``topic`` + ``producer``)."""

    path: str | None = None
    topic: str | None = None
    producer: Mapping[str, str] = field(default_factory=dict)
    delivery_timeout_s: float = 60.0

    def __repr__(self) -> str:   # the producer settings may hold secrets
        return f"DeadLetterSettings(path={self.path!r}, topic={self.topic!r})"


def from_config(cfg) -> DeadLetterSettings:
    """``DeadLetterConfig`` -> ``DeadLetterSettings``."""
    if cfg.path is not None:
        return DeadLetterSettings(path=str(cfg.path))
    return DeadLetterSettings(topic=cfg.kafka.topic, producer=cfg.kafka.producer())
