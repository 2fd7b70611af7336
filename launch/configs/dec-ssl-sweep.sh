#!/usr/bin/env bash
# The Dec-SSL sweep of seed 001 as sbatch submissions: alpha x K x E, Dec-SSL and Dec-SL side by side.
# 500 total epochs each (rounds = 500 / E). Usage: bash launch/configs/dec-ssl-sweep.sh [--dry-run]
set -euo pipefail
run() { if [ "${1:-}" = "--dry-run" ]; then shift; echo "$@"; else "$@"; fi; }
DRY=${1:-}
for alg in dec-ssl dec-sl; do
  for K in 5 10 20; do
    for alpha in 5 1 0.5 0.1 0.05 0.01; do
      for E in 5 50; do
        rounds=$((500 / E))
        run $DRY sbatch --ntasks="$K" launch/slurm.sbatch launch/configs/dec-ssl-cifar10.yaml \
          --algorithm "$alg" --peers "$K" --alpha "$alpha" --local-epochs "$E" --rounds "$rounds" \
          --name "$alg-K$K-a$alpha-E$E"
      done
    done
  done
done
