#!/usr/bin/env bash
# The main job on a fresh machine: set up, then 20 Dec-SSL peers on a cycle under mpirun.
# Extra arguments go to p2pfl.run (e.g. --rounds 5, --topology star, --download).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1
# CIFAR-10, the job's data: decoded once from ../shared/data/cifar10-jpeg.npz into $P2PFL_DATA (about a minute),
# or already there; where neither holds it the run itself says how to provide it (or add --download).
.venv/bin/python -c "from p2pfl.data.datasets import ensure_dataset; ensure_dataset('cifar10')" 2>/dev/null \
  || echo "main-job: CIFAR-10 is not here yet; the run will say where to put it (or add --download)" >&2
exec .venv/bin/mpirun -n "${RANKS:-20}" .venv/bin/python -m p2pfl.run --topology cycle "$@"
