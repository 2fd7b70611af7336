"""Dec-MAE: the masked reconstruction loss against a direct float64 loop, patches, seeded per-peer masks, a small
MAE that learns to reconstruct, gossip mixing the decoder too, and the same run on 1 and 4 ranks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from p2pfl.config import ConfigError, make_config
from p2pfl.losses.mae import mae_loss, patchify, random_masking, unpatchify
from p2pfl.models import ViTEncoder, build_encoder, init_model
from p2pfl.models.base import ModelConfigError
from p2pfl.models.mae import MAEDecoder, MAENet
from p2pfl.seeding import torch_generator

from conftest import four_ranks_equal_one
from helpers_inproc import setup_algorithm


def _reference_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, norm_pix: bool) -> float:
    """Float64 loops: per masked patch the mean squared error over its values, averaged over masked patches."""
    total, count = 0.0, 0
    for b in range(pred.shape[0]):
        for i in range(pred.shape[1]):
            if mask[b, i] == 0:
                continue
            t = [float(v) for v in target[b, i]]
            if norm_pix:
                mean = sum(t) / len(t)
                var = sum((v - mean) ** 2 for v in t) / (len(t) - 1)
                t = [(v - mean) / (var + 1e-6) ** 0.5 for v in t]
            total += sum((float(p) - v) ** 2 for p, v in zip(pred[b, i], t)) / len(t)
            count += 1
    return total / count


@pytest.mark.parametrize("norm_pix", [True, False])
def test_mae_loss_matches_a_direct_float64_loop(norm_pix: bool) -> None:
    g = torch.Generator().manual_seed(0)
    pred, target = torch.randn(3, 10, 12, generator=g), 2 + 3 * torch.randn(3, 10, 12, generator=g)
    mask = (torch.rand(3, 10, generator=g) < 0.6).float()
    mask[0, 0] = 1.0
    got = float(mae_loss(pred.double(), target.double(), mask, norm_pix=norm_pix))
    assert got == pytest.approx(_reference_loss(pred, target, mask, norm_pix), rel=1e-10)
    # unmasked patches do not count: changing them leaves the loss as it is
    moved = pred.clone()
    moved[mask == 0] += 100.0
    assert float(mae_loss(moved.double(), target.double(), mask, norm_pix=norm_pix)) == pytest.approx(got, rel=1e-10)


def test_patchify_layout_and_round_trip() -> None:
    x = torch.randn(2, 3, 8, 12)
    p = patchify(x, 4)
    assert p.shape == (2, 6, 48)
    # patch (row 1, col 2) holds pixels [4:8, 8:12] as (row, column, channel)
    assert torch.equal(p[:, 1 * 3 + 2], x[:, :, 4:8, 8:12].permute(0, 2, 3, 1).reshape(2, 48))
    square = torch.randn(2, 3, 16, 16)
    assert torch.equal(unpatchify(patchify(square, 4), 4, 3), square)


def test_patch_order_is_the_vit_patch_embedding_order() -> None:
    enc = build_encoder("vit-tiny", 3, 16)
    conv = enc.vit.embeddings.patch_embeddings
    x = torch.randn(2, 3, 16, 16)
    w = conv.projection.weight.permute(0, 2, 3, 1).reshape(conv.projection.weight.shape[0], -1)
    with torch.no_grad():
        assert torch.allclose(patchify(x, 4) @ w.T + conv.projection.bias, conv(x), atol=1e-5)


@pytest.mark.parametrize("n,ratio", [(64, 0.75), (16, 0.75), (49, 0.75), (64, 0.5), (10, 0.33)])
def test_masking_masks_exactly_round_ratio_n_per_image(n: int, ratio: float) -> None:
    keep, mask, restore = random_masking(5, n, ratio, torch.Generator().manual_seed(1))
    masked = round(ratio * n)
    assert mask.sum(1).tolist() == [masked] * 5
    assert keep.shape == (5, n - masked)
    assert bool((mask.gather(1, keep) == 0).all())
    # restore is a permutation whose inverse lists the kept patches first, then the masked ones
    shuffle = torch.argsort(restore, dim=1)
    assert torch.equal(torch.sort(restore, dim=1).values, torch.arange(n).expand(5, n))
    assert torch.equal(shuffle[:, :n - masked], keep)
    assert bool((mask.gather(1, shuffle[:, n - masked:]) == 1).all())


def test_masks_come_from_the_peers_own_stream() -> None:
    def draw(peer: int) -> list[torch.Tensor]:
        g = torch_generator(7, peer, "mask")
        return [random_masking(8, 64, 0.75, g)[1] for _ in range(3)]

    assert all(torch.equal(a, b) for a, b in zip(draw(3), draw(3)))
    assert not torch.equal(draw(2)[0], draw(3)[0])
    first, second = draw(3)[:2]
    assert not torch.equal(first, second)  # a fresh mask every step


def test_encoder_on_all_patches_in_order_is_the_plain_vit() -> None:
    model = MAENet(build_encoder("vit-tiny", 3, 32))
    init_model(model, torch.Generator().manual_seed(0))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model.encode_visible(x, torch.arange(64).expand(2, 64)), model.encoder.tokens(x))
        assert torch.allclose(model.features(x), model.encoder.tokens(x)[:, 1:].mean(1))
        keep, _, restore = random_masking(2, 64, 0.75, torch.Generator().manual_seed(2))
        assert model(x, keep, restore).shape == (2, 64, 48)


def test_decoder_puts_visible_tokens_at_their_patches_and_mask_tokens_elsewhere() -> None:
    dec = MAEDecoder(enc_dim=8, n_patches=16, patch_dim=48, dim=8, depth=1, heads=2)
    seen = {}
    dec.blocks[0].register_forward_pre_hook(lambda module, args: seen.setdefault("x", args[0]))
    with torch.no_grad():
        dec.embed.weight.copy_(torch.eye(8))
        dec.embed.bias.zero_()
        dec.pos.zero_()
        dec.mask_token.fill_(-7.0)
    keep, mask, restore = random_masking(2, 16, 0.75, torch.Generator().manual_seed(3))
    tokens = torch.randn(2, 1 + keep.shape[1], 8)
    with torch.no_grad():
        dec(tokens, restore)
    x = seen["x"]
    for b in range(2):
        assert torch.equal(x[b, 0], tokens[b, 0])
        for i in range(16):
            if mask[b, i] == 1:
                assert bool((x[b, 1 + i] == -7.0).all())
            else:
                j = keep[b].tolist().index(i)
                assert torch.equal(x[b, 1 + i], tokens[b, 1 + j])


def test_non_vit_encoders_are_refused() -> None:
    with pytest.raises(ModelConfigError, match="ViT"):
        MAENet(build_encoder("simple-cnn", 3, 32))
    with pytest.raises(ConfigError, match="vit-tiny"):
        make_config(algorithm="dec-mae", model="resnet-small")
    cfg = make_config(algorithm="dec-mae")
    assert (cfg.model, cfg.optimizer, cfg.mask_ratio) == ("vit-tiny", "adamw", 0.75)


def _reconstruction_losses(seed: int, steps: int = 60) -> tuple[float, float]:
    """(before, after) training a small MAE on a fixed batch with fresh masks: the loss on a held-out mask."""
    g = torch.Generator().manual_seed(seed)
    smooth = F.interpolate(torch.randn(16, 3, 2, 2, generator=g), size=(16, 16), mode="bilinear", align_corners=False)
    x = torch.randn(16, 3, 1, 1, generator=g) + 0.3 * smooth / smooth.std()
    target = patchify(x, 4)
    model = MAENet(ViTEncoder(3, 16, patch_size=4, hidden_size=64, depth=2, heads=2),
                   decoder_dim=64, decoder_depth=1, decoder_heads=2)
    init_model(model, torch.Generator().manual_seed(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    keep, mask, restore = random_masking(16, 16, 0.75, torch.Generator().manual_seed(99))
    with torch.no_grad():
        start = float(mae_loss(model(x, keep, restore), target, mask, norm_pix=False))
    masks = torch.Generator().manual_seed(1000 + seed)
    for _ in range(steps):
        k, m, r = random_masking(16, 16, 0.75, masks)
        loss = mae_loss(model(x, k, r), target, m, norm_pix=False)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        end = float(mae_loss(model(x, keep, restore), target, mask, norm_pix=False))
    return start, end


@pytest.mark.parametrize("seed", [0, 1])
def test_small_mae_learns_to_reconstruct_masked_patches(seed: int) -> None:
    """Each image is a random colour plus a smooth pattern: the masked patches can only be predicted from what
    the visible ones reveal, so the loss on a held-out mask falls well below that of predicting zeros (~1)."""
    start, end = _reconstruction_losses(seed)
    assert start > 0.5 and end < 0.5 * start, (start, end)


def test_peers_hold_their_mask_streams_and_gossip_mixes_the_decoder(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-mae", topology="cycle", train_subset=200)
    for p, peer in algo.peers.items():
        assert torch.equal(peer.mask_rng.get_state(), torch_generator(algo.cfg.seed, p, "mask").get_state())
    assert any(n.startswith("decoder.") for n in algo.peers[0].mixable.names)
    before = {}
    for p, peer in algo.peers.items():
        gen = torch.Generator().manual_seed(100 + p)
        with torch.no_grad():
            for t in peer.model.parameters():
                t.copy_(torch.rand(t.shape, generator=gen))
        before[p] = {k: v.clone() for k, v in peer.model.state_dict().items()}
    algo.communicate(1, algo.ctx.schedule.at(1, active=set(range(4))))
    for p, peer in algo.peers.items():
        for name in ("decoder.mask_token", "decoder.head.weight", "encoder.vit.embeddings.cls_token"):
            expected = sum(w * before[j][name] for j, w in algo.ctx.schedule.at(1).row(p))
            assert torch.allclose(peer.model.state_dict()[name], expected, atol=1e-6), name
    # one local step draws exactly one mask from the peer's stream
    peer = algo.peers[2]
    ref = torch_generator(algo.cfg.seed, 2, "mask")
    loss = algo.batch_loss(peer, *peer.data.next_batch(8))
    random_masking(8, 64, 0.75, ref)
    assert torch.isfinite(loss) and torch.equal(peer.mask_rng.get_state(), ref.get_state())


SHORT = ["-m", "p2pfl.run", "--algorithm", "dec-mae", "--dataset", "synthetic", "--peers", "4", "--rounds", "1",
         "--local-steps", "2", "--batch-size", "16", "--train-subset", "100", "--probe-epochs", "1", "--knn-k", "5",
         "--eval-every", "0", "--eval-peers", "1", "--no-progress", "--no-plots", "--batch-peers", "off"]



@pytest.mark.mpi
def test_short_run_on_4_ranks_matches_1_rank(runs_dir: Path) -> None:
    four_ranks_equal_one(SHORT, runs_dir)
    four = runs_dir / "four"
    manifest = json.loads((four / "manifest.json").read_text())
    assert [h["peers"] for h in manifest["hosts"]] == [[0], [1], [2], [3]]
    summary = json.loads((four / "summary.json").read_text())
    assert 0.0 <= summary["final"]["probe_acc_avg"] <= 1.0
