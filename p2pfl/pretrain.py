"""Pretrained encoders made here (no hub is reachable): ``python -m p2pfl.pretrain``.

    python -m p2pfl.pretrain --model simple-cnn --dataset cifar10 --objective supervised --epochs 5 \\
        --held-out-of launch/configs/fedmuscle-complete-m3.yaml --out pretrained/simple-cnn.pt
    python -m p2pfl.pretrain --model hf-vit --hf-options hidden_size=96,num_hidden_layers=3 --dataset cifar10 \\
        --out pretrained/vit        # a save_pretrained folder: use it as `model: hf:pretrained/vit`

A built-in encoder (simple-cnn, resnet-small, resnet18, vit-tiny) is written as one file: its state dict and
what it was trained on (`init: PATH` in a peers-spec group loads it into every peer of the group, bit for bit).
``hf-vit`` and ``hf-resnet`` build a Hugging Face ViT or ResNet from a configuration (seeded, offline), train it
whole and write a ``save_pretrained`` folder, which ``hf:FOLDER`` loads, with LoRA when the spec asks.

The objective is ``supervised`` (cross-entropy on the dataset's labels through a linear head, crop+flip) or
``simclr`` (NT-Xent on two SimCLR views through a projection head); the heads are not saved. The images are the
training split, optionally `--train-subset` of them, and with ``--held-out-of RUN_CONFIG`` only those that run
never uses: not the public set, not any peer's training images (`used_training_indices`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.data import load_dataset, supervised_augment, to_geometry
from p2pfl.data.augment import SimCLRAugment, simclr_crop_scale
from p2pfl.data.partition import random_subset
from p2pfl.losses import nt_xent
from p2pfl.models import SimCLRNet, SupervisedNet, build_encoder
from p2pfl.models.base import hf_library
from p2pfl.models.params import init_model
from p2pfl.models.pretrained import FORMAT, PretrainError, write_checkpoint
from p2pfl.seeding import SHARED, torch_generator

HF_FAMILIES = ("hf-vit", "hf-resnet")
OBJECTIVES = ("supervised", "simclr")


# ------------------------------------------------------------------------------------------------ data

def held_out_indices(n: int, run_config: str, dataset: str, seed: int | None = None) -> np.ndarray:
    """The training indices of `dataset` that the run of `run_config` (a YAML run configuration with a peers
    spec; with `seed` instead of its own) never reads: not its public set, not any peer's training images."""
    from p2pfl.config import load_yaml, make_config
    from p2pfl.fedmuscle.multitask import used_training_indices
    from p2pfl.fedmuscle.peerspec import load_peers_spec

    values = load_yaml(run_config)
    spec_path = values.get("peers_spec")
    if spec_path is None:
        raise PretrainError(f"--held-out-of {run_config}: the run has no peers_spec")
    # without the spec: make_config would check its init: files, which pretraining is about to write
    cfg = make_config(**{**values, "peers_spec": None, **({} if seed is None else {"seed": seed})})
    spec = load_peers_spec(str(spec_path), default_dataset=cfg.dataset, public_size=cfg.public_size, check_init=False)
    used = used_training_indices(spec, cfg, dataset, n)
    return np.setdiff1d(np.arange(n, dtype=np.int64), used)


def image_dataset(name: str) -> None:
    """Refuse, in one line, a dataset that gives no images (feature vectors, token sequences): the encoders this
    pretrains are image encoders."""
    from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
    from p2pfl.data.datasets import DATASETS, canonical_name

    gives = DATASETS.get(canonical_name(name)).capabilities & {FEATURES, TOKENS, SEQUENCE_LABELS}
    if gives:
        what = "feature vectors" if FEATURES in gives else "token sequences"
        raise PretrainError(f"--dataset {name}: gives {what}, not images; p2pfl.pretrain trains image encoders "
                            "(train a model of such data in the run itself: python -m p2pfl.run --dataset ...)")


def training_images(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(uint8 images, labels, dataset) the encoder trains on, in the requested geometry."""
    image_dataset(args.dataset)
    ds = load_dataset(args.dataset, args.data_dir)
    n = int(ds.x_train.shape[0])
    idx = np.arange(n, dtype=np.int64)
    seeds = [None] if args.held_out_seeds is None else [int(s) for s in args.held_out_seeds.split(",")]
    for run_config in args.held_out_of or []:  # several runs, several seeds: what none of them reads
        for seed in seeds:
            idx = np.intersect1d(idx, held_out_indices(n, run_config, ds.name, seed))
    if args.train_subset is not None:
        idx = random_subset(idx, args.train_subset, args.seed, "pretrain-subset")
    if idx.size < args.batch_size:
        raise PretrainError(f"only {idx.size} training images left for a batch of {args.batch_size}")
    channels = args.channels or int(ds.x_train.shape[1])
    size = args.image_size or int(ds.x_train.shape[2])
    x = to_geometry(ds.x_train[torch.as_tensor(idx)], channels, size)
    return x, ds.y_train[torch.as_tensor(idx)], ds


def normalisation(ds: Any, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The dataset's own per-channel mean and std (the run's: given by it, else its training images'), for
    `channels`-channel images: its first channel's, repeated, when --channels converts to another count."""
    mean, std = tuple(ds.mean), tuple(ds.std)
    if len(mean) != channels:
        mean, std = (mean[0],) * channels, (std[0],) * channels
    return mean, std


# ------------------------------------------------------------------------------------------------ models

def _split_top(text: str) -> list[str]:
    """`text` cut at the commas outside brackets ("a=1,b=[2,3]" -> ["a=1", "b=[2,3]"])."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _hf_options(text: str | None) -> dict[str, Any]:
    """--hf-options KEY=VALUE,...: JSON values (numbers, lists, true/false), other text as strings."""
    out: dict[str, Any] = {}
    for item in _split_top(text or ""):
        if not item.strip():
            continue
        if "=" not in item:
            raise PretrainError(f"--hf-options: expected KEY=VALUE, got {item!r}")
        key, value = (s.strip() for s in item.split("=", 1))
        out[key] = json.loads(value) if value[:1] in "[{0123456789-" or value in ("true", "false") else value
    return out


def build_hf_model(family: str, channels: int, size: int, options: dict[str, Any], seed: int) -> nn.Module:
    """A randomly initialised (seeded) Hugging Face ViT or ResNet backbone for `channels` x `size` images."""
    transformers = hf_library("transformers", f"--model {family}")
    AutoModel, ResNetConfig, ViTConfig = transformers.AutoModel, transformers.ResNetConfig, transformers.ViTConfig

    if family == "hf-vit":
        base = dict(image_size=size, patch_size=4, num_channels=channels, hidden_size=96, num_hidden_layers=3,
                    num_attention_heads=3, intermediate_size=192)
        config = ViTConfig(**{**base, **options})
    else:
        base = dict(num_channels=channels, embedding_size=16, hidden_sizes=[16, 32, 64], depths=[1, 1, 1],
                    layer_type="basic", downsample_in_first_stage=False)
        config = ResNetConfig(**{**base, **options})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModel.from_config(config)


def build_encoder_for(args: argparse.Namespace, channels: int, size: int, tmp: str) -> nn.Module:
    """The encoder to pretrain: a built-in one initialised from (seed, SHARED, "pretrain/init"), or an HF backbone
    saved to `tmp` and wrapped as the HFEncoder every peer uses."""
    if args.model in HF_FAMILIES:
        build_hf_model(args.model, channels, size, _hf_options(args.hf_options), args.seed).save_pretrained(tmp)
        return build_encoder("hf:" + tmp, channels, size, lora_rank=0)
    encoder = build_encoder(args.model, channels, size)
    init_model(encoder, torch_generator(args.seed, SHARED, "pretrain/init"))
    return encoder


# ------------------------------------------------------------------------------------------------ training

def pretrain(args: argparse.Namespace) -> dict[str, Any]:
    """Train the encoder as `args` say and write it to `args.out`; returns what was written."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    x, y, ds = training_images(args)
    channels, size = int(x.shape[1]), int(x.shape[2])
    mean, std = normalisation(ds, channels)
    with tempfile.TemporaryDirectory() as tmp:
        encoder = build_encoder_for(args, channels, size, tmp)
        if args.objective == "supervised":
            net: nn.Module = SupervisedNet(encoder, ds.num_classes)
            init_model(net.classifier, torch_generator(args.seed, SHARED, "pretrain/head"))
        else:
            net = SimCLRNet(encoder, proj_dim=args.proj_dim)
            init_model(net.projector, torch_generator(args.seed, SHARED, "pretrain/head"))
        net = net.to(device).train()
        x, y = x.to(device), y.to(device)
        opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=args.lr)
        order_rng = torch_generator(args.seed, SHARED, "pretrain/order", device)
        aug_rng = torch_generator(args.seed, SHARED, "pretrain/augment", device)
        flip_p, fill = ds.transform.flip_p, ds.transform.fill  # as the dataset's images allow (FEMNIST: no flip)
        augment = SimCLRAugment(size, channels, mean, std, scale=(simclr_crop_scale(None, size), 1.0), flip_p=flip_p)
        losses = []
        start = time.perf_counter()
        for epoch in range(args.epochs):
            order = torch.randperm(x.shape[0], generator=order_rng, device=device)
            total, steps = 0.0, 0
            for lo in range(0, x.shape[0] - args.batch_size + 1, args.batch_size):
                idx = order[lo:lo + args.batch_size]
                xb = x[idx]
                if args.objective == "supervised":
                    loss = F.cross_entropy(net(supervised_augment(xb, aug_rng, mean, std, flip_p=flip_p, fill=fill)),
                                           y[idx])
                else:
                    views = torch.cat([augment(xb, aug_rng), augment(xb, aug_rng)])
                    z1, z2 = net(views)[1].chunk(2)
                    loss = nt_xent(z1, z2, temperature=args.temperature)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total, steps = total + float(loss.detach()), steps + 1
            losses.append(total / max(1, steps))
            print(f"epoch {epoch + 1}/{args.epochs}: loss {losses[-1]:.4f}", flush=True)
        about = {"format": FORMAT, "model": args.model, "in_channels": channels, "image_size": size,
                 "dataset": ds.name, "objective": args.objective, "epochs": args.epochs, "images": int(x.shape[0]),
                 "held_out_of": args.held_out_of, "seed": args.seed, "lr": args.lr, "batch_size": args.batch_size,
                 "epoch_losses": losses, "seconds": time.perf_counter() - start}
        encoder = encoder.cpu()
        if args.model in HF_FAMILIES:
            write_hf(encoder, Path(args.out), about)
        else:
            write_checkpoint(encoder, Path(args.out), about)
    return about


def write_hf(encoder: nn.Module, folder: Path, about: dict[str, Any]) -> None:
    """The trained backbone as a save_pretrained folder, with `about` beside it as pretrain.json."""
    folder.mkdir(parents=True, exist_ok=True)
    encoder.model.save_pretrained(folder)
    tmp = folder / "pretrain.json.tmp"
    tmp.write_text(json.dumps(about, indent=1))
    os.replace(tmp, folder / "pretrain.json")


# ------------------------------------------------------------------------------------------------ CLI

def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m p2pfl.pretrain", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="simple-cnn, resnet-small, resnet18, vit-tiny, hf-vit, hf-resnet")
    p.add_argument("--hf-options", default=None, help="KEY=VALUE,... for the HF config (hidden_size=96, ...)")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--objective", choices=OBJECTIVES, default="supervised")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--temperature", type=float, default=0.2, help="NT-Xent temperature (simclr)")
    p.add_argument("--proj-dim", type=int, default=128, help="projection width (simclr; not saved)")
    p.add_argument("--train-subset", type=int, default=None, help="train on N images (a seeded subset)")
    p.add_argument("--held-out-of", action="append", default=None, metavar="RUN_CONFIG",
                   help="only images the run of this YAML configuration never reads (repeat it for several runs)")
    p.add_argument("--held-out-seeds", default=None, metavar="S,S,...",
                   help="--held-out-of the runs with each of these seeds (a study's seeds) instead of their own")
    p.add_argument("--channels", type=int, default=None, help="input channels (default: the dataset's)")
    p.add_argument("--image-size", type=int, default=None, help="input size (default: the dataset's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="a file (built-in models) or a folder (hf-*)")
    args = p.parse_args(argv)
    from p2pfl.models import encoder_names
    if args.model not in HF_FAMILIES and args.model not in encoder_names():
        p.error(f"--model: unknown {args.model!r}; allowed: {', '.join([*encoder_names(), *HF_FAMILIES])}")
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1")
    if not (args.lr > 0 and np.isfinite(args.lr)):
        p.error("--lr: must be a finite number > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        about = pretrain(args)
    except (PretrainError, ValueError, FileNotFoundError) as e:
        print(f"p2pfl.pretrain: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {about['model']} on {about['images']} {about['dataset']} images, "
          f"{about['objective']}, {about['epochs']} epochs, final loss {about['epoch_losses'][-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
