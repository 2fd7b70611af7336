"""What a peer costs in memory, and the peak a process reached: for the manifest, and for sizing a job.

    python -m p2pfl.runtime.memory [--gpu-gib 140] [--node-gib 24]

prints, for every built-in encoder, the bytes a Dec-SSL peer keeps (parameters and buffers, Adam's state, its
shard's index list) and how many such peers fit in a GPU's and a node's memory beside the training set.
"""
from __future__ import annotations

import argparse
import resource
import sys

import torch
from torch import nn

#: Optimiser state per parameter byte, by --optimizer (Adam/AdamW: two moments; SGD with momentum: one buffer).
STATE_PER_PARAM = {"adam": 2, "adamw": 2, "sgd": 1}


def model_bytes(model: nn.Module) -> int:
    """Parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def optimizer_bytes(model: nn.Module, optimizer: str, momentum: float = 0.9) -> int:
    """The state `optimizer` holds for the trainable parameters once it has stepped."""
    per = STATE_PER_PARAM[optimizer] if optimizer != "sgd" or momentum else 0
    return per * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def peer_bytes(model: nn.Module, optimizer: str, momentum: float, shard_bytes: int) -> dict[str, int]:
    """A peer's standing memory: model, optimiser state, what its training shard holds alone (its index list when
    the shard is a view of the rank's training set, `PeerData.own_bytes`)."""
    return {"parameters_bytes": model_bytes(model), "optimizer_bytes": optimizer_bytes(model, optimizer, momentum),
            "shard_bytes": int(shard_bytes)}


def peak_bytes(device: torch.device) -> dict[str, int | str]:
    """The peak memory this process reached on `device` (CUDA: the allocator's peak; CPU: peak resident set)."""
    if device.type == "cuda":
        return {"device": str(device), "peak_bytes": int(torch.cuda.max_memory_allocated(device))}
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is KiB on Linux, bytes on macOS
    return {"device": "cpu", "peak_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale}


def capacity_table(gpu_gib: float, node_gib: float) -> list[dict]:
    """Per built-in encoder (as Dec-SSL's SimCLR network on 3×32×32 images, Adam): bytes per peer and how many
    peers fit in `gpu_gib` and `node_gib` (standing memory only: a peer's model, Adam state and its shard, the index
    list of a 1/100 share of CIFAR-10's 50,000 training images, which the rank holds once; the batched step's
    working memory comes on top, per chunk of peers)."""
    from p2pfl.models import SimCLRNet, build_encoder
    training_set = 50_000 * 3 * 32 * 32 + 50_000 * 8
    shard = 50_000 // 100 * 8
    rows = []
    for name in ("simple-cnn", "resnet-small", "resnet18", "vit-tiny"):
        model = SimCLRNet(build_encoder(name, 3, 32), 128)
        per = model_bytes(model) + optimizer_bytes(model, "adam") + shard
        rows.append({"model": name, "bytes_per_peer": per,
                     "gpu_peers": int(max(0, gpu_gib * 2**30 - training_set) // per),
                     "node_peers": int(max(0, node_gib * 2**30 - training_set) // per)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--gpu-gib", type=float, default=140.0)
    parser.add_argument("--node-gib", type=float, default=24.0)
    args = parser.parse_args()
    print(f"{'model':>13} {'MiB per peer':>12} {'peers in ' + str(args.gpu_gib) + ' GiB':>18} "
          f"{'peers in ' + str(args.node_gib) + ' GiB':>18}")
    for row in capacity_table(args.gpu_gib, args.node_gib):
        print(f"{row['model']:>13} {row['bytes_per_peer'] / 2**20:12.2f} {row['gpu_peers']:18d} "
              f"{row['node_peers']:18d}")


if __name__ == "__main__":
    main()
