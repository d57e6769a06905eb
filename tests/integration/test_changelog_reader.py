"""Spark reading a Parquet changelog while its first batch is being written: the log the
sink creates before any task writes makes the reader see no batch, never a part file
that has no footer yet."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException

from mysqlcdc.sinks.changelog import read_changelog
from mysqlcdc.sinks.changelog.sinklog import SinkLog

from tests.unit.sinks.test_changelog_files import _files

pytestmark = pytest.mark.integration


def _half_written(root) -> None:
    part = root / "db=shop" / "table=item"
    part.mkdir(parents=True, exist_ok=True)
    (part / "part-00000-0000000001-0123456789abcdef-0000.c000.snappy.parquet").write_bytes(b"PAR1")


def test_without_the_log_a_reader_meets_the_half_written_file(spark, tmp_path):
    _half_written(tmp_path)          # what readers met before the sink created the log
    with pytest.raises(Exception, match="(?i)parquet"):
        read_changelog(spark, str(tmp_path)).collect()


def test_with_the_log_a_reader_sees_only_committed_batches(spark, tmp_path):
    log = SinkLog(tmp_path)
    assert log.begin()
    _half_written(tmp_path)
    with pytest.raises(AnalysisException):          # no batch yet: nothing to read
        read_changelog(spark, str(tmp_path)).collect()
    log.add(0, _files(tmp_path, 0, 3))
    assert read_changelog(spark, str(tmp_path)).count() == 3
