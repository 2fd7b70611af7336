"""Masked-autoencoder pieces (He et al., MAE): patches of an image, the random patch mask, the reconstruction loss.

Patches are flattened row-major over the patch grid (the order of the ViT's patch embedding) and each patch as
(row, column, channel), so `unpatchify(patchify(x, p), p, C) == x`. The loss is the mean squared error on the
masked patches only: the mean over a patch's values, then the mean over the masked patches of the batch.
With `norm_pix` (MAE's norm_pix_loss, on by default here as in MAE's pre-training recipe) each target patch is
first normalised by its own mean and (unbiased) variance, (t - mean) / sqrt(var + eps), which makes the target
carry the patch's local structure rather than its brightness.
"""
from __future__ import annotations

import torch

NORM_PIX_EPS = 1e-6


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) images -> (B, (H/p)·(W/p), p·p·C) patches, row-major over the grid, each patch as (p, p, C)."""
    b, c, h, w = images.shape
    if h % patch or w % patch:
        raise ValueError(f"patchify: image size {h}x{w} is not a multiple of patch {patch}")
    gh, gw = h // patch, w // patch
    x = images.reshape(b, c, gh, patch, gw, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, gh * gw, patch * patch * c)


def unpatchify(patches: torch.Tensor, patch: int, channels: int) -> torch.Tensor:
    """The inverse of `patchify` for square images: (B, N, p·p·C) -> (B, C, √N·p, √N·p)."""
    b, n, d = patches.shape
    side = int(round(n ** 0.5))
    if side * side != n or d != patch * patch * channels:
        raise ValueError(f"unpatchify: {n} patches of {d} values are not a square grid of {patch}x{patch}x{channels}")
    x = patches.reshape(b, side, side, patch, patch, channels)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(b, channels, side * patch, side * patch)


def masked_count(n_patches: int, ratio: float) -> int:
    """Patches masked per image: round(ratio · n), kept within [1, n - 1] so that the encoder always sees a patch
    and the loss always has a target."""
    if n_patches < 2:
        raise ValueError(f"masking needs at least 2 patches, got {n_patches}")
    return min(n_patches - 1, max(1, int(round(ratio * n_patches))))


def random_masking(batch: int, n_patches: int, ratio: float, generator: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fresh random mask per image, every draw from `generator` (on its device): (keep, mask, restore).

    keep: (B, n - m) indices of the visible patches (in the random order drawn); mask: (B, n) float, 1 where a
    patch is masked; restore: (B, n) the permutation that puts [visible, masked] tokens back in patch order.
    m = `masked_count(n, ratio)`.
    """
    masked = masked_count(n_patches, ratio)
    noise = torch.rand(batch, n_patches, generator=generator, device=generator.device)
    shuffle = torch.argsort(noise, dim=1, stable=True)
    restore = torch.argsort(shuffle, dim=1, stable=True)
    keep = shuffle[:, :n_patches - masked]
    mask = torch.ones(batch, n_patches, device=noise.device)
    mask[:, :n_patches - masked] = 0
    return keep, torch.gather(mask, 1, restore), restore


def mae_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, norm_pix: bool = True,
             eps: float = NORM_PIX_EPS) -> torch.Tensor:
    """Mean squared error over the masked patches: pred and target (B, N, D) patches, mask (B, N) with 1 on the
    masked ones. Per patch the mean over its D values, then the mean over the masked patches. `norm_pix`
    normalises each target patch by its own mean and unbiased variance first (MAE's norm_pix_loss)."""
    if norm_pix:
        mean = target.mean(dim=-1, keepdim=True)
        var = target.var(dim=-1, keepdim=True)
        target = (target - mean) / (var + eps).sqrt()
    per_patch = (pred - target).pow(2).mean(dim=-1)
    mask = mask.to(per_patch.dtype)
    return (per_patch * mask).sum() / mask.sum()
