#!/usr/bin/env bash
# Line and branch coverage of p2pfl/, topologies/ and analysis/ by the whole suite, the jobs its tests start (under
# mpirun too) included: pyproject's [tool.coverage.run]. Arguments go to pytest. Prints the total and writes
# coverage.json (per file) for comparing two trees.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1 COVERAGE_FILE=$PWD/.coverage
rm -f .coverage .coverage.*
.venv/bin/python -m pytest -q -n "${P2PFL_TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder -p no:cacheprovider \
  --cov --cov-report= "$@" || status=$?
.venv/bin/python -m coverage combine -q 2>/dev/null || true
.venv/bin/python -m coverage json -q -o coverage.json
.venv/bin/python -m coverage report --format=total
exit "${status:-0}"
