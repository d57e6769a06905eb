"""Typed, validated pipeline config: the models and the YAML loader.

>>> from mysqlcdc.config import load_pipeline
>>> cfg = load_pipeline("pipeline.yaml")  # doctest: +SKIP
>>> cfg.source.password()                 # doctest: +SKIP

Every option is declared in :mod:`mysqlcdc.config.models`; ``docs/CONFIG.md`` is
generated from there by ``python -m mysqlcdc.config.reference``.
"""

from mysqlcdc.config import loader, models, secret
from mysqlcdc.config.loader import ConfigProblem, load_pipeline, load_pipeline_from_dict
from mysqlcdc.config.models import (
    MAX_SERVER_ID,
    SINK_TYPES,
    AnySinkConfig,
    ChangelogSinkConfig,
    ConsoleSinkConfig,
    PipelineConfig,
    ReconnectConfig,
    SourceConfig,
    SparkConfig,
    SslConfig,
    TableFilter,
    TablesConfig,
)
from mysqlcdc.config.secret import MASK, Secret

__all__ = [*loader.__all__, *models.__all__, *secret.__all__]
