"""Batched augmentations: shapes, ranges, reproducibility, and agreement with torchvision's per-image ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF

from p2pfl.data import augment as A
from p2pfl.data.augment import ImageTransform, SimCLRAugment, normalize, supervised_apply, supervised_augment
from p2pfl.data.datasets import load_dataset
from p2pfl.data.datasets.cifar10 import CIFAR10
from p2pfl.data.datasets.fashion_mnist import FashionMNIST

MEAN3, STD3 = CIFAR10.mean, CIFAR10.std


def images(b=16, c=3, s=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, s, s), generator=g, dtype=torch.uint8)


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("channels,size", [(3, 32), (1, 28)])
def test_simclr_shapes_ranges_and_normalisation(channels, size):
    x = images(32, channels, size)
    dataset = CIFAR10 if channels == 3 else FashionMNIST
    mean, std = dataset.mean, dataset.std
    aug = SimCLRAugment(size, channels, mean, std)
    raw = aug.unnormalized(x, gen(1))
    assert raw.shape == x.shape and raw.dtype == torch.float32
    assert raw.min() >= 0 and raw.max() <= 1
    out = aug(x, gen(1))
    expected = (raw - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)
    assert torch.allclose(out, expected, atol=1e-6)


def test_simclr_views_differ_and_are_reproducible():
    x = images(32)
    aug = SimCLRAugment(32, 3, MEAN3, STD3)
    g = gen(5)
    v1, v2 = aug(x, g), aug(x, g)
    assert not torch.allclose(v1, v2)
    # every image's two views differ
    assert ((v1 - v2).flatten(1).abs().amax(1) > 1e-3).all()
    g2 = gen(5)
    assert torch.equal(aug(x, g2), v1) and torch.equal(aug(x, g2), v2)


@pytest.mark.parametrize("seed", range(5))
def test_crop_with_full_scale_and_nothing_else_is_identity(seed):
    """Property: RandomResizedCrop with scale (1, 1), no flip, no jitter, no grayscale, mean 0 / std 1 is x/255
    (for square images the only crop that fits is the whole image; otherwise the fallback is the whole image)."""
    x = images(8, 3, 32, seed=seed)
    aug = SimCLRAugment(32, 3, (0, 0, 0), (1, 1, 1), scale=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, gray_p=0.0)
    assert torch.allclose(aug(x, gen(seed)), x.float() / 255, atol=1e-6)


def test_flip_only_is_a_mirror():
    x = images(64)
    aug = SimCLRAugment(32, 3, (0, 0, 0), (1, 1, 1), scale=(1.0, 1.0), flip_p=1.0, jitter_p=0.0, gray_p=0.0)
    assert torch.allclose(aug(x, gen(0)), x.float().flip(-1) / 255, atol=1e-6)


def test_crop_boxes_follow_the_scale_and_ratio_rules():
    boxes = A.sample_crop_boxes(4000, 32, 32, gen(0))
    top, left, h, w = boxes.unbind(1)
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 32).all() and (left + w <= 32).all()
    area = h * w / 1024
    assert area.min() >= 0.06 and area.max() <= 1.0
    ratio = w / h
    assert ratio.min() >= 0.6 and ratio.max() <= 1.6  # 3/4..4/3 up to rounding of small boxes
    assert area.std() > 0.2  # crops really vary in size


@pytest.mark.numerics
def test_crop_resize_matches_interpolate_of_the_crop():
    """A box upsampled to 32×32 equals torch's bilinear resize of the cropped pixels (away from the box edge,
    where grid_sample may read the neighbour outside the box)."""
    x = torch.rand(2, 3, 32, 32)
    box = torch.tensor([[4.0, 8.0, 16.0, 16.0], [0.0, 0.0, 16.0, 16.0]])
    out = A.crop_resize_flip(x, box, torch.zeros(2, dtype=torch.bool), 32)
    ref = torch.cat([F.interpolate(x[i:i + 1, :, int(t):int(t + h), int(left):int(left + w)], size=32, mode="bilinear",
                                   align_corners=False) for i, (t, left, h, w) in enumerate(box.tolist())])
    assert torch.allclose(out[..., 1:-1, 1:-1], ref[..., 1:-1, 1:-1], atol=1e-5)


@pytest.mark.numerics
@pytest.mark.parametrize("size", [(28, 28), (32, 32), (17, 24)])
def test_axis_aligned_grid_is_affine_grid_bitwise(size):
    """The crop's separable grid equals F.affine_grid of the same per-sample maps, bit for bit (so moving off
    affine_grid changed no view)."""
    g = gen(3)
    b = 64
    ax = torch.rand(b, generator=g) * (1 - 2 * (torch.rand(b, generator=g) < 0.5).float())
    ay, cx, cy = torch.rand(b, generator=g), torch.rand(b, generator=g) - 0.5, torch.rand(b, generator=g) - 0.5
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = ax, cx, ay, cy
    ref = F.affine_grid(theta, [b, 1, *size], align_corners=False)
    assert torch.equal(A._axis_aligned_grid(ax, cx, ay, cy, *size), ref)


@pytest.mark.parametrize("op,ref,lo,hi", [
    (A.adjust_brightness, TF.adjust_brightness, 0.6, 1.4),
    (A.adjust_contrast, TF.adjust_contrast, 0.6, 1.4),
    (A.adjust_saturation, TF.adjust_saturation, 0.6, 1.4),
    (A.adjust_hue, TF.adjust_hue, -0.1, 0.1),
])
@pytest.mark.numerics
def test_colour_ops_match_torchvision_per_image(op, ref, lo, hi):
    x = torch.rand(12, 3, 8, 8)
    factors = lo + (hi - lo) * torch.rand(12, generator=gen(3))
    got = op(x, factors)
    want = torch.stack([ref(x[i], float(factors[i])) for i in range(12)])
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.numerics
def test_contrast_on_gray_images_matches_torchvision():
    x = torch.rand(6, 1, 8, 8)
    f = torch.linspace(0.6, 1.4, 6)
    want = torch.stack([TF.adjust_contrast(x[i], float(f[i])) for i in range(6)])
    assert torch.allclose(A.adjust_contrast(x, f), want, atol=1e-6)


def test_hsv_round_trip():
    x = torch.rand(4, 3, 16, 16)
    x[0] = 0.3  # gray: zero saturation
    assert torch.allclose(A.hsv_to_rgb(A.rgb_to_hsv(x)), x, atol=1e-5)


def test_grayscale_always_gives_equal_channels():
    x = images(16)
    aug = SimCLRAugment(32, 3, (0, 0, 0), (1, 1, 1), gray_p=1.0)
    out = aug(x, gen(0))
    assert torch.allclose(out[:, 0], out[:, 1]) and torch.allclose(out[:, 1], out[:, 2])


def test_jitter_fraction_is_about_p():
    """With crop and flip off, the share of images changed by colour jitter is about 0.8."""
    x = images(1000, 3, 8)
    aug = SimCLRAugment(8, 3, (0, 0, 0), (1, 1, 1), scale=(1.0, 1.0), flip_p=0.0, gray_p=0.0)
    out = aug(x, gen(0))
    changed = ((out - x.float() / 255).flatten(1).abs().amax(1) > 1e-4).float().mean()
    assert 0.74 < float(changed) < 0.86


@pytest.mark.numerics
@pytest.mark.parametrize("channels", [3, 1])
def test_colour_without_masks_equals_masked(channels):
    """The GPU's branch-free colour path (every operation on every image, the selected results kept) gives
    the CPU's masked one: the same images, up to float rounding."""
    x = images(256, channels, 16)
    mean, std = (0.5,) * channels, (0.25,) * channels
    aug = SimCLRAugment(16, channels, mean, std)
    draws = aug.draw(x, gen(3))
    masked = aug.apply_unnormalized(x, draws, masked=True)
    free = aug.apply_unnormalized(x, draws, masked=False)
    torch.testing.assert_close(free, masked, rtol=0, atol=2e-6)
    assert not torch.equal(masked, aug.apply_unnormalized(x, aug.draw(x, gen(4)), masked=True))


def test_one_draw_per_view_and_draws_concatenate():
    """A view's randomness is one B×DRAW_WIDTH call on the generator, so the draws of two half batches
    (one generator, in turn) are the draw of the whole batch, and apply gives the same views."""
    x = images(32)
    aug = SimCLRAugment(32, 3, MEAN3, STD3)
    g = gen(7)
    whole = aug.draw(x, g)
    assert set(whole) == {"u"} and whole["u"].shape == (32, A.DRAW_WIDTH)
    g = gen(7)
    halves = [aug.draw(x[:16], g), aug.draw(x[16:], g)]
    joined = {"u": torch.cat([h["u"] for h in halves])}
    assert torch.equal(joined["u"], whole["u"])
    assert torch.equal(aug.apply(x, joined), aug.apply(x, whole))


def test_supervised_offsets_and_flips_are_uniform():
    """The crop offsets are uniform over 0..2p and the flips have rate p, as torch.randint / rand gave."""
    x = images(9000, 1, 4)
    u = A.supervised_draw(x, gen(0))["u"]
    offsets = torch.floor(u[:, :2] * 9).long()
    counts = torch.stack([torch.bincount(offsets[:, k], minlength=9) for k in range(2)]).float()
    assert counts.shape == (2, 9)
    chi2 = ((counts - 1000) ** 2 / 1000).sum(1)
    assert bool((chi2 < 26.1).all()), chi2  # 8 degrees of freedom: P(chi2 > 26.1) = 0.001
    assert abs(float((u[:, 2] < 0.5).float().mean()) - 0.5) < 0.02


def test_float_input_equals_uint8_input():
    x = images(8)
    aug = SimCLRAugment(32, 3, MEAN3, STD3)
    assert torch.allclose(aug(x, gen(2)), aug(x.float() / 255, gen(2)), atol=1e-6)


def test_supervised_augment_is_a_shifted_mirrored_copy():
    x = images(64)
    out = supervised_augment(x, gen(0), (0, 0, 0), (1, 1, 1))
    assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    padded = F.pad(x, (4, 4, 4, 4)).float() / 255
    # every output is some 32×32 window of the padded image, possibly mirrored
    for i in range(64):
        hits = [(dy, dx, fl) for dy in range(9) for dx in range(9) for fl in (False, True)
                if torch.equal(out[i], (padded[i, :, dy:dy + 32, dx:dx + 32].flip(-1) if fl
                                        else padded[i, :, dy:dy + 32, dx:dx + 32]))]
        assert hits, f"image {i} is not a window of its padded original"
    assert torch.equal(supervised_augment(x, gen(0), (0, 0, 0), (1, 1, 1)), out)
    assert not torch.equal(supervised_augment(x, gen(1), (0, 0, 0), (1, 1, 1)), out)


def crops(x: torch.Tensor, u: torch.Tensor, pad: int, fill: int, flip: bool) -> torch.Tensor:
    """Each image's crop of the original size from it padded by `pad` pixels of `fill`, at the offsets its uniforms
    draw (floor(u (2 pad + 1)), torch.randint's rule), mirrored where its third uniform is below 1/2 when `flip`:
    MOON's crop and flip written per image with numpy, apart from p2pfl.data.augment."""
    side = x.shape[-1]
    padded = np.pad(x.numpy(), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    out = []
    for i, (a, b, c) in enumerate(u.tolist()):
        oy, ox = int(np.floor(a * (2 * pad + 1))), int(np.floor(b * (2 * pad + 1)))
        crop = padded[i, :, oy:oy + side, ox:ox + side]
        out.append(crop[:, :, ::-1] if flip and c < 0.5 else crop)
    return torch.from_numpy(np.stack(out))


@pytest.mark.parametrize("size", [32, 28, 8])
def test_a_dataset_declaring_nothing_keeps_moons_crop_and_flip_bit_for_bit(size: int):
    """The synthetic set declares no transform of its own, as no built-in photograph set does: its training batches
    are MOON's recipe as before, bit for bit (zero padding, mirrored where the draw is below 1/2), equal to the crop
    and flip written image by image, and its manifest record gains nothing."""
    ds = load_dataset("synthetic", image_size=size, num_train=64, num_test=8)
    assert ds.transform == ImageTransform(flip=True, fill=0) and "augment" not in ds.extra
    x = ds.x_train
    draws = A.supervised_draw(x, gen(5))
    t = ds.transform
    out = supervised_apply(x, draws, ds.mean, ds.std, flip_p=t.flip_p, fill=t.fill)
    assert torch.equal(out, normalize(crops(x, draws["u"], A.crop_padding(size), 0, flip=True), ds.mean, ds.std))
    assert torch.equal(out, supervised_apply(x, draws, ds.mean, ds.std))  # the call as it was before datasets said
    assert bool((draws["u"][:, 2] < 0.5).any()) and bool((draws["u"][:, 2] >= 0.5).any())


def test_the_supervised_crop_pads_with_the_fill_and_flips_never_at_flip_p_0():
    """fill 255 pads with white (255 of uint8, 1.0 of float images), flip_p 0 mirrors nothing, for the same draws."""
    x = images(64, 1, 28)
    draws = A.supervised_draw(x, gen(2))
    out = supervised_apply(x, draws, (0.0,), (1.0,), flip_p=0.0, fill=255)
    assert torch.equal(out, crops(x, draws["u"], 4, 255, flip=False).float() / 255)
    assert torch.equal(supervised_apply(x.float() / 255, draws, (0.0,), (1.0,), flip_p=0.0, fill=255), out)


def test_supervised_augment_reflect_padding_and_no_padding():
    x = images(4)
    out = supervised_augment(x, gen(0), (0, 0, 0), (1, 1, 1), padding=0, flip_p=0.0)
    assert torch.allclose(out, x.float() / 255)
    refl = supervised_augment(x, gen(0), (0, 0, 0), (1, 1, 1), padding_mode="reflect")
    assert refl.shape == x.shape


def test_normalize():
    x = images(4)
    out = normalize(x, MEAN3, STD3)
    want = torch.stack([TF.normalize(x[i].float() / 255, MEAN3, STD3) for i in range(4)])
    assert torch.allclose(out, want, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_augmentations_and_peer_data_on_cuda():
    from p2pfl.data.loader import PeerData
    from p2pfl.seeding import torch_generator

    x = images(64).cuda()
    aug = SimCLRAugment(32, 3, MEAN3, STD3)
    g1, g2 = torch_generator(0, 3, "augment", "cuda"), torch_generator(0, 3, "augment", "cuda")
    v = aug(x, g1)
    assert v.device.type == "cuda" and v.shape == x.shape and torch.equal(v, aug(x, g2))
    raw = SimCLRAugment(32, 3, (0, 0, 0), (1, 1, 1)).unnormalized(x, g1)
    assert raw.min() >= 0 and raw.max() <= 1
    s = supervised_augment(x, g1, MEAN3, STD3)
    assert s.device.type == "cuda" and s.shape == x.shape
    pd = PeerData(x.cpu(), torch.arange(64), peer=0, seed=0, device="cuda")
    seen = torch.cat([pd.next_batch(16)[1] for _ in range(4)])
    assert seen.device.type == "cuda" and sorted(seen.tolist()) == list(range(64))


@pytest.mark.parametrize("side,pad", [(32, 4), (28, 4), (16, 2), (8, 1), (64, 8)])
def test_the_supervised_crop_pads_by_an_eighth_of_the_side(side: int, pad: int):
    """CIFAR's 4 pixels of 32 (and Fashion-MNIST's 4 of 28) kept; other sides padded in proportion, so an 8-pixel
    digit moves by at most one pixel. The default equals an explicit padding of that size, draw for draw."""
    assert A.crop_padding(side) == pad
    x = torch.randint(0, 256, (64, 1, side, side), dtype=torch.uint8)
    draws = A.supervised_draw(x, torch.Generator().manual_seed(3))
    default = A.supervised_apply(x, draws, [0.0], [1.0])
    assert torch.equal(default, A.supervised_apply(x, draws, [0.0], [1.0], padding=pad))
    offsets = torch.floor(draws["u"][:, :2] * (2 * pad + 1)).long() - pad  # the shift of each image
    assert offsets.abs().max() == pad
