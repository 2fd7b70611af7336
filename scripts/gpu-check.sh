#!/usr/bin/env bash
# What to run where a GPU is lent (it has never run on one yet): the tests that use CUDA, the stacked-peer
# equivalence on the GPU, the main job on the GPU, and the batched-peer benchmark (loop vs batched, 20 and 100
# peers). Writes everything under ${OUT:-gpu-check}/. Expects .venv from scripts/setup.sh and the data under
# $P2PFL_DATA (default data-cache).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
export P2PFL_DATA=${P2PFL_DATA:-$PWD/data-cache} OMP_NUM_THREADS=1
PY=.venv/bin/python
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
$PY -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))" \
    | tee "$OUT/torch.txt"
# the stacked models against each model, and the batched probes, on the GPU
timeout 300 $PY -m pytest -q -p no:cacheprovider tests/test_batched_peers.py \
    tests/test_batched_probe.py tests/test_data_augment.py -k "not mpi" 2>&1 | tail -20 | tee "$OUT/tests.txt"
# the main job's method with 100 peers on one GPU (one rank), batched and not
for mode in on off; do
    /usr/bin/time -v timeout 600 $PY -m p2pfl.run --device cuda --peers 100 --topology random --p 0.05 \
        --rounds 10 --batch-peers $mode --no-progress --out "$OUT/runs" --name "dec-ssl-100-$mode" \
        > "$OUT/job-$mode.txt" 2>&1
    tail -25 "$OUT/job-$mode.txt"
done
timeout 900 $PY benchmarks/bench_batched_peers.py --device cuda --peers 20,100 --models simple-cnn,resnet-small \
    --json "$OUT/bench_batched_peers.json" 2>&1 | tee "$OUT/bench_batched_peers.txt"
