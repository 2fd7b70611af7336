#!/usr/bin/env bash
# The whole test suite, in one process and under mpirun, after the set-up it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1
exec .venv/bin/python -m pytest -q "$@"
