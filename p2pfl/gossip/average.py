"""The exact network average of the peers' vectors and their consensus distance (SPEC §2): collectives that
do not depend on where the peers sit or on the order of the reduction."""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from p2pfl.comm.world import World

#: The float64 bytes stacked at a time by `exact_mean` (its memory beyond the vectors themselves): a block a core's
#: cache holds (any grouping gives the same integer sums and row sums, so the size changes no result). With one
#: stack a block, not a view a vector, `spread` over 10,000 vectors of 100 floats went from 240-270 ms to 10-22 ms
#: on the 2-core CPU (it was one 8 MB block).
BLOCK_BYTES = 1 << 20


def _blocks(vectors: dict[int, torch.Tensor]) -> Iterator[torch.Tensor]:
    """The vectors in peer order as float64 CPU rows, stacked BLOCK_BYTES at a time."""
    peers = sorted(vectors)
    if not peers:
        return
    per = max(1, BLOCK_BYTES // (8 * max(1, vectors[peers[0]].numel())))
    for start in range(0, len(peers), per):
        yield _stacked_rows([vectors[p] for p in peers[start:start + per]])


def _stacked_rows(vectors: list[torch.Tensor]) -> torch.Tensor:
    """[len(vectors) × numel] float64 CPU rows of equal-sized vectors, outside autograd (one stack where their
    shapes agree, not a view a vector)."""
    with torch.no_grad():
        try:
            block = torch.stack(vectors)
        except RuntimeError:  # equal sizes, other shapes
            block = torch.stack([v.reshape(-1) for v in vectors])
        return block.reshape(len(vectors), -1).to("cpu", torch.float64)


def exact_mean(world: World, vectors: dict[int, torch.Tensor], n_peers: int,
               like: torch.Tensor | None = None) -> torch.Tensor:
    """The average over the `n_peers` peers whose vectors the ranks hold, summed exactly in fixed point (int64),
    so that the result does not depend on which rank holds which peer or on the order of the reduction (the
    local vectors are converted a block at a time: integer sums are exact in any grouping).
    Collective; a rank holding none (its peers crashed) passes `like`, a tensor of the vectors' shape."""
    sample = next(iter(vectors.values())) if vectors else like
    assert sample is not None, "exact_mean: a rank without vectors passes like="
    maxima = [float(block.abs().max()) for block in _blocks(vectors)]
    local_max = math.nan if any(math.isnan(m) for m in maxima) else max(maxima, default=0.0)
    global_max = world.allreduce_max(local_max)
    if global_max == 0.0 or not math.isfinite(global_max):
        return torch.zeros_like(sample, dtype=torch.float64) + (global_max if not math.isfinite(global_max) else 0)
    shift = torch.tensor(float(61 - math.ceil(math.log2(global_max * n_peers))), dtype=torch.float64)
    total = torch.zeros(sample.numel(), dtype=torch.int64)
    for block in _blocks(vectors):
        total += torch.round(torch.ldexp(block, shift)).long().sum(dim=0)
    world.allreduce_sum_(total.numpy())
    mean = torch.ldexp(total.double(), -shift) / n_peers
    return mean.reshape(sample.shape)


def _squared_distances(vectors: dict[int, torch.Tensor], mean: torch.Tensor) -> dict[int, float]:
    """‖x_p − x̄‖² of each peer in float64. With one torch thread a block's row sums are each row's own sum, bit for
    bit (whatever rows share the block), so the rows go a block at a time; with more threads torch may split a
    long sum differently in a block than alone, so each vector is summed on its own."""
    if torch.get_num_threads() > 1:
        return {p: float((v.detach().reshape(mean.shape).double().cpu() - mean).pow(2).sum())
                for p, v in vectors.items()}
    flat = mean.reshape(-1)
    peers = sorted(vectors)
    sums: list[float] = []
    for block in _blocks(vectors):
        sums += (block - flat).pow(2).sum(dim=1).tolist()
    return dict(zip(peers, sums))


def spread(world: World, vectors: dict[int, torch.Tensor], n_peers: int,
           like: torch.Tensor | None = None) -> tuple[torch.Tensor, float | None]:
    """(x̄, Σ_i ‖x_i − x̄‖²) over the `n_peers` peers whose vectors the ranks hold, the sum taken in peer order on
    rank 0 (None elsewhere), so it is the same float on any number of ranks. Collective; `like` as exact_mean's."""
    mean = exact_mean(world, vectors, n_peers, like)
    parts = _squared_distances(vectors, mean)
    gathered = world.gather(parts)
    if gathered is None:
        return mean, None
    merged: dict[int, float] = {}
    for part in gathered:
        merged.update(part)
    total = 0.0
    for p in sorted(merged):
        total += merged[p]
    return mean, total


def consensus_distance(world: World, vectors: dict[int, torch.Tensor], n_peers: int,
                       like: torch.Tensor | None = None) -> float | None:
    """(1/K) Σ_i ‖x_i − x̄‖² / ‖x̄‖² over the K = `n_peers` peers whose vectors the ranks hold (SPEC §2);
    collective, the value is returned on rank 0 only. A rank holding none passes `like` (see exact_mean)."""
    mean, total = spread(world, vectors, n_peers, like)
    if total is None:
        return None
    denom = float(mean.pow(2).sum())
    return total / n_peers / denom if denom > 0 else float("inf") if total > 0 else 0.0
