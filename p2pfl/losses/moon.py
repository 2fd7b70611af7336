"""MOON's model-contrastive term (SPEC §5, reference notes §A.2)."""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ._util import check_temperature


def moon_contrastive(
    z: torch.Tensor,
    z_glob: torch.Tensor,
    z_prev: torch.Tensor | Sequence[torch.Tensor] | None,
    temperature: float = 0.5,
) -> torch.Tensor:
    """ℓ_con of MOON, averaged over the batch.

    Per sample, ``-log(e^{cos(z, z_glob)/T} / (e^{cos(z, z_glob)/T} + Σ_k e^{cos(z, z_prev_k)/T}))``: pull the
    representation towards the round's starting model (the neighbourhood mix) and away from the peer's own
    previous model(s). ``z_prev`` is one (B, d) tensor or a list (a pool of previous models, each adding a
    negative term, as MOON's code does); ``None`` or an empty list gives exactly 0 (round 1: no previous
    model). ``z_glob`` and ``z_prev`` are constants (detached).
    """
    t = check_temperature("temperature", temperature)
    if z.dim() != 2 or z_glob.shape != z.shape:
        raise ValueError(f"moon_contrastive: z and z_glob must both be (B, d), "
                         f"got {tuple(z.shape)}, {tuple(z_glob.shape)}")
    if z_prev is None:
        prev: list[torch.Tensor] = []
    elif isinstance(z_prev, torch.Tensor):
        prev = [z_prev] if z_prev.dim() == 2 else list(z_prev.unbind(0))
    else:
        prev = list(z_prev)
    cols = [F.cosine_similarity(z, z_glob.detach(), dim=-1)]
    for p in prev:
        if p.shape != z.shape:
            raise ValueError(f"moon_contrastive: every z_prev must have shape {tuple(z.shape)}, got {tuple(p.shape)}")
        cols.append(F.cosine_similarity(z, p.detach(), dim=-1))
    logits = torch.stack(cols, dim=1) / t
    target = torch.zeros(z.shape[0], dtype=torch.long, device=z.device)
    return F.cross_entropy(logits, target)
