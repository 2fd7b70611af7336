#!/usr/bin/env bash
# The linter, then the whole test suite (in one process and under mpirun), after the set-up they need.
# This is the README's test command and all that CI (.ci/run) runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# Slurm for the `slurm` tests (tests/test_slurm.py, tests/test_slurm_study.py): as root with apt-get, Debian's
# packages are installed once (skipped when dpkg says all four are installed already). Installed only: the tests'
# session fixture starts its own one-node cluster (private munged, own ports) and stops it, so a munged that the
# packages' post-install may have started is left alone. Without root or apt-get the slurm tests skip.
SLURM_PACKAGES=(slurmctld slurmd slurm-client munge)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && command -v dpkg >/dev/null \
   && [ "$(dpkg -s "${SLURM_PACKAGES[@]}" 2>/dev/null | grep -c '^Status: install ok installed$')" \
        != "${#SLURM_PACKAGES[@]}" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${SLURM_PACKAGES[@]}" >/dev/null
fi
bash scripts/setup.sh
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q --durations=30 "$@"
