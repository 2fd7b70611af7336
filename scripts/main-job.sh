#!/usr/bin/env bash
# The main job on a fresh machine: set up, then 20 Dec-SSL peers on a cycle under mpirun.
# Extra arguments go to p2pfl.run (e.g. --rounds 5, --topology star).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1
exec .venv/bin/mpirun -n "${RANKS:-20}" .venv/bin/python -m p2pfl.run --topology cycle "$@"
