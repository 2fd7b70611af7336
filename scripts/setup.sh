#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a virtual environment with p2pfl and its dependencies (MPI included),
# and Fashion-MNIST (Debian's dataset-fashion-mnist: installed as root, unpacked into data-cache/ otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import p2pfl, torch, mpi4py, torchvision, transformers, peft, hypothesis, scipy, pandas, opacus" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.p2pfl-installed ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # The versions the golden records (tests/golden) were made with; the package itself has no upper bound.
  .venv/bin/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
  # dev: the test tools; hf: transformers and peft, which the vit-tiny, MAE, hf: and LoRA tests build models with
  .venv/bin/python -m pip install -q -e ".[dev,hf]"
  touch .venv/.p2pfl-installed
fi

FMNIST_SYSTEM=/usr/share/datasets/fashion-mnist
FMNIST_LOCAL=data-cache/fashion-mnist
if ! ls "$FMNIST_SYSTEM"/train-images-idx3-ubyte.gz >/dev/null 2>&1 \
   && ! ls "$FMNIST_LOCAL"/train-images-idx3-ubyte.gz >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download dataset-fashion-mnist >/dev/null) || {
      echo "setup: cannot fetch Fashion-MNIST as a normal user; ask an administrator for" \
           "'apt-get install dataset-fashion-mnist' or place the idx .gz files in $FMNIST_LOCAL" >&2; exit 1; }
    dpkg-deb -x "$tmp"/dataset-fashion-mnist_*.deb "$tmp/x"
    mkdir -p "$FMNIST_LOCAL"
    cp "$tmp"/x/usr/share/datasets/fashion-mnist/*.gz "$FMNIST_LOCAL"/
    rm -rf "$tmp"
  fi
fi
