#!/usr/bin/env bash
# FedMuscle in its paper's regime at CPU scale (issue 14): pretrain the two encoders on CIFAR-10 images that no
# run of the study reads (both at once), run the 24 runs, then the Δ% report. About 45 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
HELD=(--held-out-of launch/configs/fedmuscle-pretrained-cpu.yaml --held-out-seeds 0,1,2 --train-subset 10000
      --epochs 4 --dataset cifar10)
[ -f pretrained/simple-cnn-cifar10.pt ] || $PY -m p2pfl.pretrain --model simple-cnn "${HELD[@]}" \
    --out pretrained/simple-cnn-cifar10.pt > pretrained-simple-cnn.log 2>&1 &
[ -f pretrained/vit-cifar10/config.json ] || $PY -m p2pfl.pretrain --model hf-vit "${HELD[@]}" \
    --out pretrained/vit-cifar10 > pretrained-vit.log 2>&1 &
wait
$PY -m p2pfl.study launch/studies/fedmuscle-pretrained-cpu.yaml --jobs "${JOBS:-2}"
$PY -m analysis.muscle studies/fedmuscle-pretrained-cpu
