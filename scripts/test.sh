#!/usr/bin/env bash
# The linter, then the whole test suite (in one process and under mpirun), after the set-up they need.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q --durations=30 "$@"
