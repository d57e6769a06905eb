"""The service layer: several pipelines in one process, a REST API and metrics."""

from mysqlcdc.api.service import PipelineService

__all__ = ["PipelineService"]
