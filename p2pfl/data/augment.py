"""Batched image augmentations on the images' own device, driven by a ``torch.Generator``.

Every random choice for a batch is drawn up front as tensors (no per-image Python loop), so a batch of B
images costs a handful of tensor ops. Given the same generator state, the output is the same.

- :class:`SimCLRAugment`: RandomResizedCrop (scale 0.08–1, ratio 3/4–4/3) and horizontal flip as one per-sample
  affine grid + ``grid_sample``; ColorJitter(0.4, 0.4, 0.4, 0.1) with p = 0.8, its four parts in a per-sample
  random order as in torchvision; RandomGrayscale p = 0.2; normalise (SPEC §4; no blur on CIFAR).
  One-channel images get brightness and contrast only.
- :func:`supervised_augment`: random crop with 4-pixel padding on 32-pixel images (the same eighth of other
  sizes: :func:`crop_padding`) and horizontal flip (MOON's CIFAR recipe).
- :class:`ImageTransform`: what a dataset's images allow these (the dataset declares it,
  p2pfl.data.datasets._base.Dataset): the flip (off for handwriting) and the crop padding's fill.
- :func:`normalize`: uint8 → float in [0, 1] → (x − mean) / std, for evaluation.

Feature vectors B×F (a tabular dataset's, p2pfl.capabilities.FEATURES) pass the supervised transform and
`normalize` untouched but for the cast to the run's dtype: they are standardised when read. Token ids B×T (int64,
p2pfl.capabilities.TOKENS) pass untouched, never cast.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale
#: The horizontal flip's probability in MOON's supervised recipe, SimCLR's views and MAE's, where a dataset allows it.
FLIP_P = 0.5


@dataclass(frozen=True)
class ImageTransform:
    """What a dataset's images allow the training augmentations: the horizontal flip (off where a mirror image is
    another class or no sample at all: handwriting, a mirrored 'b' is a 'd') and the uint8 value the supervised crop's
    padding is filled with (0, black, as torchvision's RandomCrop; a light background asks for its own colour).
    The default is every built-in photograph dataset's, so their augmented batches are what they always were."""

    flip: bool = True
    fill: int = 0

    @property
    def flip_p(self) -> float:
        """The probability a training view is mirrored: `FLIP_P`, or 0 (the draws are the same either way)."""
        return FLIP_P if self.flip else 0.0

    def record(self) -> dict[str, Any]:
        """The manifest's `augment` entry of the dataset record."""
        return {"flip": self.flip, "pad": self.fill}


def to_float(x: torch.Tensor) -> torch.Tensor:
    """uint8 images → the run's float dtype (--dtype) in [0, 1]; float images are cast to it."""
    return x.to(torch.get_default_dtype()).div_(255.0) if x.dtype == torch.uint8 else x.to(torch.get_default_dtype())


def _stat(values: Sequence[float], x: torch.Tensor) -> torch.Tensor:
    """Per-channel values shaped to broadcast over `x` (images B×C×H×W, or feature vectors B×F: one per feature)."""
    return torch.as_tensor(values, dtype=x.dtype, device=x.device).view(1, -1, *(1,) * (x.dim() - 2))


def normalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Evaluation transform: uint8 (or [0, 1] float) images B×C×H×W → (x/255 − mean) / std as float32; float
    feature vectors B×F → (x − mean) / std (a tabular dataset's 0 and 1: the features as read); int64 token ids
    as they are."""
    if x.dtype == torch.int64:
        return x  # token ids (p2pfl.capabilities.TOKENS): the model embeds them
    xf = to_float(x)
    return (xf - _stat(mean, xf)) / _stat(std, xf)


# ------------------------------------------------------------------------------------------------ geometry

def to_geometry(x: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """uint8 images N×C×H×W in another input format: RGB -> gray (luma weights) or gray -> RGB (repeat), then
    antialiased bilinear resize to size×size, rounded back to uint8. Unchanged when the format already fits."""
    c, h = int(x.shape[1]), int(x.shape[2])
    if c == channels and h == size and int(x.shape[3]) == size:
        return x
    xf = x.float()
    if c == 3 and channels == 1:
        w = torch.tensor(GRAY_WEIGHTS, dtype=xf.dtype, device=xf.device).view(1, 3, 1, 1)
        xf = (xf * w).sum(dim=1, keepdim=True)
    elif c == 1 and channels == 3:
        xf = xf.expand(-1, 3, -1, -1)
    elif c != channels:
        raise ValueError(f"cannot convert {c}-channel public images to {channels} channels")
    if (h, int(x.shape[3])) != (size, size):
        xf = F.interpolate(xf, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return xf.round_().clamp_(0, 255).to(torch.uint8).contiguous()


def sample_crop_boxes(batch: int, height: int, width: int, generator: torch.Generator,
                      scale: tuple[float, float] = (0.08, 1.0),
                      ratio: tuple[float, float] = (3 / 4, 4 / 3), device=None, attempts: int = 10) -> torch.Tensor:
    """Per-sample RandomResizedCrop boxes (top, left, h, w) as a B×4 float tensor, torchvision's rule batched:
    up to ``attempts`` (area, log-ratio) draws per sample, the first that fits wins; otherwise a central crop
    with the ratio clamped to ``ratio``."""
    u = torch.rand(batch, attempts, 4, generator=generator, device=device, dtype=torch.float64)
    return crop_boxes(u, height, width, scale, ratio)


def crop_boxes(u: torch.Tensor, height: int, width: int, scale: tuple[float, float] = (0.08, 1.0),
               ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> torch.Tensor:
    """`sample_crop_boxes` from its uniforms `u` (B×attempts×4: area, log-ratio, top, left per attempt)."""
    area = height * width
    target_area = area * (scale[0] + (scale[1] - scale[0]) * u[..., 0])
    log_r = math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * u[..., 1]
    aspect = torch.exp(log_r)
    w = torch.round(torch.sqrt(target_area * aspect))
    h = torch.round(torch.sqrt(target_area / aspect))
    ok = (w > 0) & (h > 0) & (w <= width) & (h <= height)
    # torch.randint(0, H - h + 1) batched: floor(u * (H - h + 1))
    top = torch.floor(u[..., 2] * (height - h + 1)).clamp(min=0)
    left = torch.floor(u[..., 3] * (width - w + 1)).clamp(min=0)
    first = torch.argmax(ok.to(torch.int8), dim=1)  # first valid attempt (0 when none)
    pick = lambda t: t.gather(1, first[:, None])[:, 0]  # noqa: E731
    boxes = torch.stack([pick(top), pick(left), pick(h), pick(w)], dim=1)
    # fallback: central crop, whole image with the aspect ratio clamped
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        fh, fw = height, int(round(height * ratio[1]))
    else:
        fw, fh = width, height
    fallback = torch.tensor([(height - fh) // 2, (width - fw) // 2, fh, fw], dtype=boxes.dtype, device=boxes.device)
    any_ok = ok.any(dim=1, keepdim=True)
    return torch.where(any_ok, boxes, fallback.expand_as(boxes)).to(torch.get_default_dtype())


def crop_resize_flip(x: torch.Tensor, boxes: torch.Tensor, flip: torch.Tensor, size: int | tuple[int, int],
                     ) -> torch.Tensor:
    """Crop each image to its box (top, left, h, w), resize bilinearly to ``size`` and mirror it where ``flip``,
    all in one ``grid_sample`` over per-sample affine grids. A full-image box with no flip is the identity."""
    xf = to_float(x)
    b, _, height, width = xf.shape
    out_h, out_w = (size, size) if isinstance(size, int) else size
    top, left, h, w = boxes.to(xf.dtype).unbind(1)
    sx = w / width
    sy = h / height
    cx = 2 * (left + w / 2) / width - 1
    cy = 2 * (top + h / 2) / height - 1
    sign = 1 - 2 * flip.to(xf.dtype)
    grid = _axis_aligned_grid(sx * sign, cx, sy, cy, out_h, out_w)
    return F.grid_sample(xf, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _axis_aligned_grid(ax: torch.Tensor, cx: torch.Tensor, ay: torch.Tensor, cy: torch.Tensor, out_h: int,
                       out_w: int) -> torch.Tensor:
    """F.affine_grid (align_corners=False) of the per-sample maps x' = ax·x + cx, y' = ay·y + cy, bitwise: a
    crop has no rotation or shear, so each column's x' and each row's y' are one multiply-add, several times
    cheaper on a CPU than affine_grid's batched 3×2 matmuls (tests/test_augment.py checks the equality)."""
    identity = torch.eye(2, 3, dtype=ax.dtype, device=ax.device).unsqueeze(0)
    base = F.affine_grid(identity, [1, 1, out_h, out_w], align_corners=False)[0]  # affine_grid's own coordinates
    gx = ax[:, None] * base[0, :, 0][None, :] + cx[:, None]  # [B, W]
    gy = ay[:, None] * base[:, 0, 1][None, :] + cy[:, None]  # [B, H]
    b = ax.shape[0]
    return torch.stack([gx[:, None, :].expand(b, out_h, out_w), gy[:, :, None].expand(b, out_h, out_w)], dim=3)


# ------------------------------------------------------------------------------------------------ colour

def _gray(x: torch.Tensor) -> torch.Tensor:
    """B×1×H×W luminance of RGB (or the single channel of gray) images."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.unbind(1)
    return (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b).unsqueeze(1)


def _blend(a: torch.Tensor, b: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    f = factor.view(-1, 1, 1, 1)
    return (f * a + (1 - f) * b).clamp_(0, 1)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Per-sample brightness: x · factor, clipped to [0, 1] (torchvision's adjust_brightness, batched)."""
    return (x * factor.view(-1, 1, 1, 1)).clamp_(0, 1)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Per-sample contrast: blend with the image's mean luminance (torchvision's adjust_contrast, batched)."""
    mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
    return _blend(x, mean.expand_as(x), factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Per-sample saturation: blend with the grayscale image (torchvision's adjust_saturation, batched)."""
    return _blend(x, _gray(x).expand_as(x), factor)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """B×3×H×W RGB in [0, 1] → HSV with hue in [0, 1)."""
    r, g, b = x.unbind(1)
    maxc, _ = x.max(dim=1)
    minc, _ = x.min(dim=1)
    delta = maxc - minc
    s = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), torch.zeros_like(maxc))
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    hr = torch.remainder((g - b) / safe, 6.0)
    hg = (b - r) / safe + 2.0
    hb = (r - g) / safe + 4.0
    h = torch.where(maxc == r, hr, torch.where(maxc == g, hg, hb))
    h = torch.where(delta > 0, h / 6.0, torch.zeros_like(h))
    return torch.stack([torch.remainder(h, 1.0), s, maxc], dim=1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """B×3×H×W HSV (hue in [0, 1)) → RGB in [0, 1], branch-free: channel n ∈ (5, 3, 1) is
    v − v·s·clamp(min(k, 4 − k), 0, 1) with k = (n + 6h) mod 6."""
    h, s, v = x.unbind(1)
    n = torch.tensor([5.0, 3.0, 1.0], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    k = torch.remainder(n + 6.0 * h.unsqueeze(1), 6.0)
    ramp = torch.minimum(k, 4.0 - k).clamp_(0, 1)
    vv = v.unsqueeze(1)
    return (vv - vv * s.unsqueeze(1) * ramp).clamp_(0, 1)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Per-sample hue rotation by ``shift`` ∈ [−0.5, 0.5] turns (torchvision's adjust_hue, batched)."""
    hsv = rgb_to_hsv(x)
    h = torch.remainder(hsv[:, 0] + shift.view(-1, 1, 1), 1.0)
    return hsv_to_rgb(torch.stack([h, hsv[:, 1], hsv[:, 2]], dim=1))


# ------------------------------------------------------------------------------------------------ SimCLR

#: SimCLR's smallest crop area (0.08) keeps a recognisable part of a 32-px or larger image; on 28x28 garments it
#: often keeps a blank corner, so smaller images default to a milder crop. Measured on Fashion-MNIST (SimCLR,
#: simple CNN, T 0.2, 2 epochs, probe on its features): crop 0.5 0.780, 0.2 0.772, untrained 0.730.
SIMCLR_CROP_SCALE, SMALL_IMAGE_CROP_SCALE, SMALL_IMAGE = 0.08, 0.5, 32
#: RandomResizedCrop's attempts per image, and the uniforms one SimCLR view takes per image (SimCLRAugment.params).
CROP_ATTEMPTS = 10
DRAW_WIDTH = 4 * CROP_ATTEMPTS + 11


def simclr_crop_scale(option: float | None, image_size: int) -> float:
    """The smallest crop area fraction: --crop-scale when given, else SimCLR's 0.08 from 32 px up and 0.5 below."""
    if option is not None:
        return float(option)
    return SIMCLR_CROP_SCALE if image_size >= SMALL_IMAGE else SMALL_IMAGE_CROP_SCALE


class SimCLRAugment:
    """SimCLR view generator for a batch: crop+resize, flip, colour jitter, grayscale, normalise.

    ``__call__(x, generator)`` takes uint8 (or [0, 1] float) images B×C×H×W on any device and a generator on
    that device, and returns float32 B×C×size×size. Probabilities and strengths are arguments so that tests
    (and ablations) can switch parts off.
    """

    def __init__(self, image_size: int, channels: int, mean: Sequence[float], std: Sequence[float],
                 scale: tuple[float, float] = (0.08, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3),
                 flip_p: float = FLIP_P, jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1),
                 jitter_p: float = 0.8, gray_p: float = 0.2):
        if channels not in (1, 3):
            raise ValueError(f"SimCLRAugment supports 1 or 3 channels, not {channels}")
        if len(mean) != channels or len(std) != channels:
            raise ValueError(f"mean and std need {channels} values each, got {len(mean)} and {len(std)}")
        self.image_size = int(image_size)
        self.channels = channels
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.scale = scale
        self.ratio = ratio
        self.flip_p = flip_p
        self.jitter = jitter
        self.jitter_p = jitter_p
        self.gray_p = gray_p

    def __repr__(self) -> str:
        return (f"SimCLRAugment(size={self.image_size}, channels={self.channels}, scale={self.scale}, "
                f"flip_p={self.flip_p}, jitter={self.jitter}, jitter_p={self.jitter_p}, gray_p={self.gray_p})")

    def _factor_range(self, strength: float) -> tuple[float, float]:
        return max(0.0, 1.0 - strength), 1.0 + strength

    def draw(self, x: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The random numbers of one view of every image of `x`: one B×DRAW_WIDTH tensor of float64 uniforms
        from `generator` (one call, so a peer's draw is one kernel on a GPU; `params` turns them into the crop,
        flip and colour parameters for many peers' images at once). Per image, so draws concatenate."""
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(f"expected images B×{self.channels}×H×W, got shape {tuple(x.shape)}")
        return {"u": torch.rand(x.shape[0], DRAW_WIDTH, generator=generator, device=x.device, dtype=torch.float64)}

    def params(self, draws: dict[str, torch.Tensor], height: int, width: int) -> dict[str, torch.Tensor]:
        """The view parameters of `draws`' uniforms: crop boxes (CROP_ATTEMPTS attempts of 4 columns), then one
        column each for the flip and the jitter gate, four jitter factors, four keys ordering the jitter's
        parts (their argsort), and the grayscale gate."""
        u = draws["u"]
        c = 4 * CROP_ATTEMPTS
        return {"boxes": crop_boxes(u[:, :c].reshape(-1, CROP_ATTEMPTS, 4), height, width, self.scale, self.ratio),
                "flip": u[:, c] < self.flip_p,
                "apply_jitter": u[:, c + 1] < self.jitter_p,
                "u": u[:, c + 2:c + 6].to(torch.get_default_dtype()),
                "order": torch.argsort(u[:, c + 6:c + 10], dim=1),
                "to_gray": u[:, c + 10] < self.gray_p}

    def unnormalized(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The augmented views in [0, 1], before normalisation."""
        return self.apply_unnormalized(x, self.draw(x, generator))

    def apply_unnormalized(self, x: torch.Tensor, draws: dict[str, torch.Tensor], masked: bool | None = None
                           ) -> torch.Tensor:
        """The views of `x` for `draws` (from `draw`), in [0, 1]. `masked` (default: on a CPU) applies each
        colour operation to the images it selects; otherwise to all, keeping the selected results
        (`torch.where`): more arithmetic, but no host-device synchronisation, which dominates on a GPU."""
        p = self.params(draws, int(x.shape[2]), int(x.shape[3]))
        boxes, flip, apply_jitter, u = p["boxes"], p["flip"], p["apply_jitter"], p["u"]
        order, to_gray = p["order"], p["to_gray"]
        masked = x.device.type == "cpu" if masked is None else masked
        out = crop_resize_flip(x, boxes, flip, self.image_size)

        bri, con, sat, hue = self.jitter
        factors = []
        for k, s in enumerate((bri, con, sat)):
            lo, hi = self._factor_range(s)
            factors.append(lo + (hi - lo) * u[:, k])
        factors.append(-hue + 2 * hue * u[:, 3])
        ops = [adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue]
        active = [bri > 0, con > 0, sat > 0 and self.channels == 3, hue > 0 and self.channels == 3]
        if self.jitter_p > 0 and any(active):
            for position in range(4):
                for op_id in range(4):
                    if not active[op_id]:
                        continue
                    sel = apply_jitter & (order[:, position] == op_id)
                    if not masked:
                        out = torch.where(sel.view(-1, 1, 1, 1), ops[op_id](out, factors[op_id]), out)
                    elif bool(sel.any()):
                        out[sel] = ops[op_id](out[sel], factors[op_id][sel])
        if self.channels == 3 and self.gray_p > 0:
            if not masked:
                out = torch.where(to_gray.view(-1, 1, 1, 1), _gray(out).expand_as(out), out)
            elif bool(to_gray.any()):
                out[to_gray] = _gray(out[to_gray]).expand(-1, 3, -1, -1)
        return out

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One augmented, normalised view of every image in the batch."""
        return self.apply(x, self.draw(x, generator))

    def apply(self, x: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        """The normalised views of `x` for the parameters `draws` (from `draw`)."""
        out = self.apply_unnormalized(x, draws)
        return (out - _stat(self.mean, out)) / _stat(self.std, out)


# ------------------------------------------------------------------------------------------------ supervised

def supervised_draw(x: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The random numbers of `supervised_augment` for every image of `x`: one B×3 tensor of float64 uniforms
    (row offset, column offset, flip), one call per batch; none for feature vectors B×F (no crop or flip)."""
    if x.dim() == 2:
        return {}
    return {"u": torch.rand(x.shape[0], 3, generator=generator, device=x.device, dtype=torch.float64)}


def crop_padding(size: int) -> int:
    """The supervised crop's padding for images of side `size`: CIFAR's 4 pixels of 32, the same eighth of other
    sides (4 on Fashion-MNIST's 28, 1 on 8-pixel digits, where 4 would move a digit by half its width)."""
    return max(1, round(size / 8))


def supervised_augment(x: torch.Tensor, generator: torch.Generator, mean: Sequence[float], std: Sequence[float],
                       padding: int | None = None, flip_p: float = FLIP_P, padding_mode: str = "constant",
                       fill: int = 0) -> torch.Tensor:
    """Supervised training transform: random crop of the original size from the image padded by ``padding``
    (default `crop_padding` of its side; with ``fill``, 0 by default, or "reflect" as in MOON's CIFAR-10 code),
    horizontal flip with ``flip_p``, then normalise."""
    return supervised_apply(x, supervised_draw(x, generator), mean, std, padding, padding_mode, flip_p, fill)


def supervised_apply(x: torch.Tensor, draws: dict[str, torch.Tensor], mean: Sequence[float], std: Sequence[float],
                     padding: int | None = None, padding_mode: str = "constant", flip_p: float = FLIP_P,
                     fill: int = 0) -> torch.Tensor:
    """`supervised_augment` with given draws: cropping and flipping are one gather on the uint8 batch. ``fill`` is
    the constant padding's value in uint8 units (of 255 on float images). Feature vectors B×F (a tabular dataset)
    have no crop or flip: they are only normalised."""
    if x.dim() == 2:
        return normalize(x, mean, std)
    b, c, height, width = x.shape
    if padding is None:
        padding = crop_padding(height)
    dev = x.device
    u = draws["u"]
    offsets = torch.floor(u[:, :2] * (2 * padding + 1)).long()  # torch.randint(0, 2p + 1) from uniforms
    oy, ox, flip = offsets[:, 0], offsets[:, 1], u[:, 2] < flip_p
    if padding > 0:
        if padding_mode == "constant":
            padded = F.pad(x, (padding,) * 4, value=fill if x.dtype == torch.uint8 else fill / 255)
        else:
            padded = F.pad(x.to(torch.get_default_dtype()), (padding,) * 4, mode=padding_mode).to(x.dtype)
    else:
        padded = x
    rows = oy[:, None] + torch.arange(height, device=dev)[None]
    cols_fwd = torch.arange(width, device=dev)[None]
    cols = ox[:, None] + torch.where(flip[:, None], width - 1 - cols_fwd, cols_fwd)
    bi = torch.arange(b, device=dev)[:, None, None, None]
    ci = torch.arange(c, device=dev)[None, :, None, None]
    out = padded[bi, ci, rows[:, None, :, None], cols[:, None, None, :]]
    return normalize(out, mean, std)
