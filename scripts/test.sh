#!/usr/bin/env bash
# The linter, then the whole test suite (on every core, and under mpirun), after the set-up they need; then the
# numerics tests again under other CPU kernels.
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
# One worker a core (pytest-xdist; P2PFL_TEST_WORKERS=1 for one process), a module's tests on one worker.
workers=(-n "${P2PFL_TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder)  # conftest orders the modules
.venv/bin/python -m pytest -q "${workers[@]}" --durations=30 "$@"
# The tests marked `numerics` (two computation paths compared to a tolerance) again under other CPU kernels: an
# AVX2-only machine's and the generic ones (torch's dispatch, MKL's and oneDNN's), so a bound that holds on this
# CPU's kernels alone fails here rather than on a user's machine. OPENBLAS_CORETYPE is left as the machine sets it.
# Run with no arguments (the whole suite, as CI), or with P2PFL_NUMERICS=1 for the numerics tests among "$@".
[ $# = 0 ] || [ "${P2PFL_NUMERICS:-0}" = 1 ] || exit 0
unset P2PFL_TEST_MODULE_SECONDS  # the module times are the whole suite's, above
# With no arguments, only the modules that mark tests `numerics` are collected (not the whole suite, twice).
[ $# -gt 0 ] || set -- $(grep -l -E "mark\.numerics" tests/test_*.py)
for kernels in "avx2 AVX2 AVX2" "default SSE4_2 SSE41"; do
  read -r aten mkl onednn <<<"$kernels"
  echo "numerics under ATEN_CPU_CAPABILITY=$aten MKL_ENABLE_INSTRUCTIONS=$mkl ONEDNN_MAX_CPU_ISA=$onednn"
  status=0
  ATEN_CPU_CAPABILITY=$aten MKL_ENABLE_INSTRUCTIONS=$mkl ONEDNN_MAX_CPU_ISA=$onednn \
    .venv/bin/python -m pytest -q "${workers[@]}" -p no:cacheprovider -m numerics "$@" || status=$?
  [ "$status" = 0 ] || [ "$status" = 5 ] || exit "$status"  # 5: the arguments selected no numerics test
done
