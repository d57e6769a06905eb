#!/usr/bin/env bash
# Reproduce the benchmark in one command: generate the binlogs under bench/data/
# unless a generated set already exists, then compare mysqlcdc with
# python-mysql-replication on one core. Writes bench/out/*.json; edits no docs.
#
#   bash bench/run.sh                       # defaults below
#   bash bench/run.sh --small --reps 1      # any bench/compare.py options instead
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ARGS=("$@")
if [ ${#ARGS[@]} -eq 0 ]; then
    ARGS=(--peer-limit 200000 --reps 3 --mysqlcdc-modes arrow,stream,parser --src-commit HEAD)
fi
GEN_ARGS=()
for i in "${!ARGS[@]}"; do
    case "${ARGS[$i]}" in
        --small) GEN_ARGS+=(--small) ;;
        --rows|--seed) GEN_ARGS+=("${ARGS[$i]}" "${ARGS[$((i + 1))]}") ;;
    esac
done
"$PY" bench/workload.py --reuse "${GEN_ARGS[@]}"
"$PY" bench/compare.py "${ARGS[@]}"
