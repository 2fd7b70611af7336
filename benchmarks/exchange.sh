#!/usr/bin/env bash
# Exchange benchmark on a cycle of 4 and 8 ranks (see bench_exchange.py). Usage: bash benchmarks/exchange.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIRUN=${MPIRUN:-$(dirname "$PY")/mpirun}
for n in 4 8; do
  OMP_NUM_THREADS=1 "$MPIRUN" -n "$n" "$PY" benchmarks/bench_exchange.py "$@"
done
