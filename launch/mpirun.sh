#!/usr/bin/env bash
# mpirun launcher on one machine or an allocation: bash launch/mpirun.sh RANKS [p2pfl.run flags]
set -euo pipefail
RANKS=${1:?usage: launch/mpirun.sh RANKS [flags]}
shift
MPIRUN=${MPIRUN:-mpirun}
EXTRA=()
if "$MPIRUN" --version 2>&1 | grep -qi "open mpi"; then
  EXTRA=(--oversubscribe)
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$MPIRUN" "${EXTRA[@]}" -n "$RANKS" python -m p2pfl.run "$@"
