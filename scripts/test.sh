#!/usr/bin/env bash
# One command: install what is needed, then run the whole test suite
# (unit, integration and e2e tiers; extra args go to pytest, e.g. -m unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# Two worker processes (pytest-xdist; the tests of a file stay on one): most of an e2e test's
# time is waiting (a JVM starting, a pipeline's trigger, an outage), so two use the two
# cores that one leaves half idle. Each worker has its own servers and one SparkSession
# for all its tests. `-n 0` (or MYSQLCDC_TEST_WORKERS=0) runs in one process.
# Files go to the workers in collection order, longest first (tests/conftest.py), so
# the run does not end on one long file with the other worker idle.
exec .venv/bin/python -m pytest -n "${MYSQLCDC_TEST_WORKERS:-2}" --dist loadfile \
    --no-loadscope-reorder "$@"
