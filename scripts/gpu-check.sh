#!/usr/bin/env bash
# What to run where a GPU is lent: the tests that use CUDA, the batched-peer benchmark (loop vs batched, 20 and
# 100 peers), the limit benchmark (the job against a bare PyTorch loop), the main job on the GPU under mpirun, the
# 100-peer Dec-SSL job batched, and the scale benchmark. Everything goes to ${OUT:-gpu-check}/: log.txt (all
# output), bench_batched_peers.json, bench_limit.json, runs.tar.gz (the run folders' summaries
# and manifests). Python: .venv from scripts/setup.sh when present, else the machine's python that holds torch, with
# the wheels under .whl/ installed into it (mpi4py and mpich, when the machine lacks an MPI). Data: $P2PFL_DATA, else .gpu-data/
# (a copy of the Fashion-MNIST files, and ../shared/data/cifar10-jpeg.npz for the main job: 56 MB, which with the
# 14 MB of wheels passes the device tool's 64 MiB carry limit, so carry it without the mpich wheel when the machine
# has an MPI, or leave it out: the main job then runs on Fashion-MNIST and says so), else data-cache/.
# STEP_SCALE=0.1 shrinks every step for a dry run on CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/log.txt
RUNS=${RUNS:-/tmp/p2pfl-gpu-runs}
DEVICE=${DEVICE:-cuda}
SCALE=${STEP_SCALE:-1}
rm -rf "$RUNS"
mkdir -p "$RUNS"
if [ -z "${P2PFL_DATA:-}" ]; then
    if [ -d .gpu-data ]; then P2PFL_DATA=$PWD/.gpu-data; else P2PFL_DATA=$PWD/data-cache; fi
fi
export P2PFL_DATA OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1

say() { echo "=== $(date +%T) $*" | tee -a "$LOG"; }
step() {  # step SECONDS CMD...: run with a limit, output to the log, the exit status reported
    local limit=$1; shift
    say "$* (limit ${limit}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" >> "$LOG" 2>&1
    local rc=$?
    say "rc $rc after $((SECONDS - t0))s"
}
scaled() { python3 -c "import sys; print(max(1, round($1 * $SCALE)))"; }

if [ -x .venv/bin/python ]; then
    PY=.venv/bin/python
    MPIRUN=.venv/bin/mpirun
else  # the machine's python that holds torch; the carried MPI wheels go into its environment
    PY=python3
    for c in /opt/torch/.venv/bin/python3 $(command -v python3); do
        if "$c" -c "import torch" 2>/dev/null; then PY=$c; break; fi
    done
    if ls .whl/*.whl > /dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl >> "$LOG" 2>&1
    fi
    MPIRUN=$(dirname "$PY")/mpirun
    [ -x "$MPIRUN" ] || MPIRUN=$(command -v mpirun || true)
fi

say "machine"
nvidia-smi >> "$LOG" 2>&1
$PY -c "import torch, mpi4py; from mpi4py import MPI; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'mpi4py', mpi4py.__version__, MPI.Get_library_version().splitlines()[0])" \
    2>&1 | tee -a "$LOG"

# the stacked models against each model, the batched probes and the augmentations, on the GPU too
step "$(scaled 100)" $PY -m pytest -q -p no:cacheprovider tests/test_batched_peers.py tests/test_batched_probe.py \
    tests/test_data_augment.py -k "not mpi"

# loop vs batched, side by side in one process
step "$(scaled 150)" $PY benchmarks/bench_batched_peers.py --device "$DEVICE" --peers 20,100 \
    --models simple-cnn,resnet-small --json "$OUT/bench_batched_peers.json"

# issue 46: the job against the bare PyTorch loop of the same work (benchmarks/bench_limit.py), on the GPU: server
# FedAvg and Dec-SSL, 16 and 100 peers on one rank, peer by peer and batched, 20 steps of 32 a round
LIMIT_DATA=cifar10
$PY -c "from p2pfl.data.datasets import ensure_dataset; ensure_dataset('cifar10')" >> "$LOG" 2>&1 \
    || LIMIT_DATA=fashion-mnist
step "$(scaled 360)" $PY benchmarks/bench_limit.py --device "$DEVICE" --dataset "$LIMIT_DATA" \
    --cases fedavg-server dec-ssl --peers 16 100 --ranks 1 --rounds "$(scaled 5)" --local-steps 20 --batch-size 32 \
    --images 640 --repeats 2 --timeout "$(scaled 120)" --json "$OUT/bench_limit.json"

# the main job: 20 Dec-SSL peers on a cycle, MAIN_RANKS ranks sharing the GPU (20/MAIN_RANKS batched peers each;
# on an H200 one rank took 114 s, four ranks 6-7 s a round: processes sharing a GPU take turns)
MAIN_RANKS=${MAIN_RANKS:-1}
LAUNCH=("$MPIRUN" -n "$MAIN_RANKS")
[ "$MAIN_RANKS" = 1 ] && LAUNCH=()
MAIN_DATA=()  # the main job's own data (CIFAR-10) when it is here, else Fashion-MNIST
if ! $PY -c "from p2pfl.data.datasets import ensure_dataset; ensure_dataset('cifar10')" >> "$LOG" 2>&1; then
    MAIN_DATA=(--dataset fashion-mnist)
    say "CIFAR-10 not found: the main job runs on Fashion-MNIST"
fi
step "$(scaled 150)" "${LAUNCH[@]}" $PY -m p2pfl.run --topology cycle --peers 20 --device "$DEVICE" \
    "${MAIN_DATA[@]}" --rounds "$(scaled 10)" --no-progress --out "$RUNS" --name "main-job-$MAIN_RANKS-ranks"

# the 100-peer Dec-SSL job of issue 12 (random graph p 0.05, 10 rounds, every peer scored), batched, one rank
# (the benchmark above has the loop beside it)
step "$(scaled 70)" $PY -m p2pfl.run --device "$DEVICE" --dataset fashion-mnist --peers 100 --topology random --p 0.05 \
    --rounds "$(scaled 10)" --batch-peers on --no-progress --out "$RUNS" --name dec-ssl-100

# issue 29: set-up, a round and memory from 100 to 10,000 peers (consensus and quadratic, d = 100; fedavg at 1,000
# peers on 2 ranks when an mpirun is here), the peers on the GPU
SCALE_RANKS=(1)
[ -n "$MPIRUN" ] && SCALE_RANKS=(1 2)
SCALE_FEDAVG=()
[ -z "$MPIRUN" ] && SCALE_FEDAVG=(--skip-fedavg)
step "$(scaled 400)" $PY benchmarks/bench_scale.py --device "$DEVICE" --peers 100 1000 10000 \
    --ranks "${SCALE_RANKS[@]}" "${SCALE_FEDAVG[@]}" --timeout "$(scaled 120)" --json "$OUT/bench_scale.json"

say "done"
(cd "$RUNS" && tar czf "$OUT/runs.tar.gz" --exclude='*.pt' --exclude='checkpoint*' . ) 2>> "$LOG"
ls -la "$OUT" >> "$LOG"
