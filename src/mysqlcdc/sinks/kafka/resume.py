"""Resume a pipeline from its Kafka commit log when its checkpoint is lost.

Spark's checkpoint stays the source of truth: a query that still has one ignores
the start position set here. Without one, it starts at the end position of the
last fully delivered batch (the commit log's newest record), so changes after it
may be published twice and none is skipped. With several Kafka sinks the earliest
of their positions wins.
"""

from __future__ import annotations

import logging

from mysqlcdc.config.models import KafkaSinkConfig, PipelineConfig
from mysqlcdc.errors import ConfigError
from mysqlcdc.sinks.kafka.commitlog import read_last_commit
from mysqlcdc.sinks.kafka.settings import from_sink_config
from mysqlcdc.types import BinlogPosition

__all__ = ["wants_sink_resume", "resume_from_sink"]

log = logging.getLogger(__name__)


def wants_sink_resume(cfg: PipelineConfig) -> bool:
    return any(isinstance(s, KafkaSinkConfig) and s.resume_from_sink for s in cfg.sinks)


def resume_from_sink(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` with ``source.start`` set to the Kafka commit log's last end position."""
    sinks = [s for s in cfg.sinks if isinstance(s, KafkaSinkConfig)]
    if not sinks:
        raise ConfigError("--resume-from-sink needs a kafka sink in the pipeline")
    found: list[BinlogPosition] = []
    for sink in sinks:
        record = read_last_commit(from_sink_config(sink, cfg.name))
        if record is None:
            log.warning("kafka commit log of %s is empty; starting from source.start (%s)",
                        sink.bootstrap_servers, cfg.source.start)
            return cfg
        found.append(record.position)
    start = min(found)
    log.info("resuming from the kafka commit log at %s", start)
    source = cfg.source.model_copy(update={"start": start})
    return cfg.model_copy(update={"source": source})
