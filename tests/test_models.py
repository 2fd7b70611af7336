"""Tests for p2pfl.models: shapes, parameter counts, the mixable state, deterministic init, LoRA."""
from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from p2pfl.models import (
    HFEncoder,
    LinearClassifier,
    MixableState,
    ModelConfigError,
    MoonNet,
    RepresentationNet,
    SimCLRNet,
    SupervisedNet,
    bn_parameter_mask,
    bn_tensor_names,
    build_encoder,
    count_parameters,
    init_model,
    trainable_parameter_names,
)

BUILTIN = ["simple-cnn", "resnet18", "resnet-small", "vit-tiny"]
GEOMS = [(1, 28), (3, 32)]
FEAT = {"simple-cnn": 84, "resnet18": 512, "resnet-small": 64, "vit-tiny": 192}


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def images(b: int, c: int, s: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(b, c, s, s, generator=gen(seed))


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------ encoders


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("c,s", GEOMS)
def test_encoder_output_shapes(name, c, s):
    enc = build_encoder(name, c, s)
    assert enc.feat_dim == FEAT[name]
    out = enc(images(3, c, s))
    assert out.shape == (3, FEAT[name])
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_unknown_encoder_and_option_raise_one_line_value_error():
    with pytest.raises(ValueError) as ei:
        build_encoder("resnet999", 3, 32)
    msg = str(ei.value)
    assert "\n" not in msg and all(n in msg for n in BUILTIN) and "hf:" in msg
    with pytest.raises(ModelConfigError, match="does not take option"):
        build_encoder("simple-cnn", 3, 32, widths=(1, 2))
    with pytest.raises(ValueError, match="not a local directory"):
        build_encoder("hf:/nonexistent/model/dir", 3, 32)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        build_encoder("vit-tiny", 3, 30)


def test_simple_cnn_layer_shapes_match_moon():
    cifar = build_encoder("simple-cnn", 3, 32)
    shapes = {n: tuple(p.shape) for n, p in cifar.named_parameters()}
    assert shapes == {
        "conv1.weight": (6, 3, 5, 5), "conv1.bias": (6,),
        "conv2.weight": (16, 6, 5, 5), "conv2.bias": (16,),
        "fc1.weight": (120, 400), "fc1.bias": (120,),
        "fc2.weight": (84, 120), "fc2.bias": (84,),
    }
    gray = build_encoder("simple-cnn", 1, 28)
    assert tuple(gray.conv1.weight.shape) == (6, 1, 5, 5)
    assert tuple(gray.fc1.weight.shape) == (120, 16 * 4 * 4)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in cifar.modules())
    # MOON network on top: l1 = Linear(84,84), l2 = Linear(84,256), classifier Linear(256,10).
    net = MoonNet(cifar, num_classes=10)
    assert tuple(net.head.l1.weight.shape) == (84, 84)
    assert tuple(net.head.l2.weight.shape) == (256, 84)
    assert tuple(net.classifier.weight.shape) == (10, 256)


def test_resnet18_matches_torchvision_with_cifar_stem():
    torchvision = pytest.importorskip("torchvision")
    tv = torchvision.models.resnet18(weights=None, num_classes=10)
    tv.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    tv.maxpool = nn.Identity()
    tv.fc = nn.Identity()
    ours = build_encoder("resnet18", 3, 32)
    # Closed form: torchvision resnet18 (11,689,512) - fc (512*1000+1000) - 7x7 stem (3*64*49) + 3x3 stem (3*64*9).
    closed = 11_689_512 - (512 * 1000 + 1000) - 3 * 64 * 49 + 3 * 64 * 9
    assert count_parameters(ours) == closed == count_parameters(tv) == 11_168_832
    ours.load_state_dict(tv.state_dict(), strict=True)  # same names and shapes
    ours.eval(), tv.eval()
    x = images(2, 3, 32)
    torch.testing.assert_close(ours(x), tv(x), rtol=1e-5, atol=1e-5)
    gray = build_encoder("resnet18", 1, 28)
    assert count_parameters(gray) == closed - 2 * 64 * 9


def test_resnet_init_scheme_matches_kaiming_fan_out():
    enc = build_encoder("resnet18", 3, 32)
    init_model(enc, gen(3))
    w = enc.layer4[1].conv2.weight  # fan_out = 512 * 9
    expected = math.sqrt(2.0 / (512 * 9))
    assert abs(w.std().item() / expected - 1) < 0.02
    assert torch.equal(enc.bn1.weight, torch.ones(64)) and torch.equal(enc.bn1.bias, torch.zeros(64))


def test_resnet_small_structure():
    enc = build_encoder("resnet-small", 3, 32)
    widths = [enc.layer1[0].conv1.out_channels, enc.layer2[0].conv1.out_channels, enc.layer3[0].conv1.out_channels]
    assert widths == [16, 32, 64]
    assert len(enc.layer1) == len(enc.layer2) == len(enc.layer3) == 1
    assert any(isinstance(m, nn.BatchNorm2d) for m in enc.modules())


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_tiny_forward_and_backward(pool):
    enc = build_encoder("vit-tiny", 3, 32, hidden_size=64, depth=2, heads=2, pool=pool)
    assert enc.config.patch_size == 4 and enc.config.num_hidden_layers == 2
    x = images(2, 3, 32)
    tok = enc.tokens(x)
    assert tok.shape == (2, 1 + 8 * 8, 64)
    out = enc(x)
    expect = tok[:, 0] if pool == "cls" else tok[:, 1:].mean(1)
    torch.testing.assert_close(out, expect)
    out.sum().backward()
    assert enc.vit.embeddings.cls_token.grad is not None


# ------------------------------------------------------------------ composite networks


def test_composite_network_outputs():
    x = images(4, 3, 32)
    sim = SimCLRNet(build_encoder("resnet-small", 3, 32), proj_dim=128)
    h, z = sim(x)
    assert h.shape == (4, 64) and z.shape == (4, 128)
    kinds = [type(m) for m in sim.projector.net]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear]

    sup = SupervisedNet(build_encoder("simple-cnn", 3, 32), num_classes=10)
    assert sup(x).shape == (4, 10) and sup.features(x).shape == (4, 84)

    moon = MoonNet(build_encoder("simple-cnn", 3, 32), num_classes=10)
    h, z, logits = moon(x)
    assert (h.shape, z.shape, logits.shape) == ((4, 84), (4, 256), (4, 10))
    torch.testing.assert_close(logits, moon.classifier(z))  # classifier reads the projection output
    torch.testing.assert_close(z, moon.head.l2(torch.relu(moon.head.l1(h))))


def test_representation_net_groups_disjoint_cover_and_contrastive_step_leaves_head():
    net = RepresentationNet(build_encoder("resnet-small", 3, 32), rep_dim=32, head=LinearClassifier(64, 5))
    rep = list(net.representation_parameters())
    head = list(net.head_parameters())
    rep_ids, head_ids = {id(p) for p in rep}, {id(p) for p in head}
    assert not rep_ids & head_ids
    assert rep_ids | head_ids == {id(p) for p in net.parameters()}
    assert len(rep) + len(head) == len(list(net.parameters()))
    x = images(4, 3, 32)
    assert net.represent(x).shape == (4, 32) and net(x).shape == (4, 5)
    before = state(net.head)
    opt = torch.optim.SGD(net.representation_parameters(), lr=0.1)
    loss = net.represent(x).pow(2).mean() + net(x).pow(2).mean()  # head gets gradients but is not stepped
    loss.backward()
    opt.step()
    for k, v in net.head.state_dict().items():
        assert torch.equal(v, before[k])


# ------------------------------------------------------------------ mixable state / FedBN

BN_NAME = re.compile(
    r"^(encoder\.bn1|encoder\.layer\d\.\d\.(bn1|bn2|downsample\.1)|projector\.net\.1)\."
    r"(weight|bias|running_mean|running_var|num_batches_tracked)$"
)


def _float_names(model: nn.Module) -> set[str]:
    named = list(model.named_parameters()) + list(model.named_buffers())
    return {n for n, t in named if t.is_floating_point()}


def test_fedbn_excludes_exactly_the_batchnorm_tensors():
    net = SimCLRNet(build_encoder("resnet-small", 3, 32))
    all_names = {n for n, _ in net.named_parameters()} | {n for n, _ in net.named_buffers()}
    expected_bn = {n for n in all_names if BN_NAME.match(n)}
    assert len(expected_bn) == 5 * (1 + 3 * 2 + 2 + 1)  # stem, 3 blocks x 2, 2 downsample, projector BN
    assert bn_tensor_names(net) == expected_bn
    mix = MixableState(net, fedbn=True)
    assert not set(mix.names) & expected_bn
    assert set(mix.names) == _float_names(net) - expected_bn
    full = MixableState(net, fedbn=False)
    assert set(full.names) == _float_names(net)
    assert not any(n.endswith("num_batches_tracked") for n in full.names)
    assert full.numel == sum(t.numel() for n, t in net.state_dict().items() if t.is_floating_point())
    mask = bn_parameter_mask(net)
    assert mask == [bool(BN_NAME.match(n)) for n, _ in net.named_parameters()]


def test_fedbn_decssl_rule_keeps_block_bn_affine_and_all_running_stats():
    net = SimCLRNet(build_encoder("resnet-small", 3, 32))
    local = bn_tensor_names(net, rule="decssl")
    block_affine = re.compile(r"^encoder\.layer\d\.\d\.bn[12]\.(weight|bias)$")
    expected = {n for n, _ in net.named_buffers() if n.endswith(("running_mean", "running_var"))}
    expected |= {n for n, _ in net.named_parameters() if block_affine.match(n)}
    assert local == expected
    mix = MixableState(net, fedbn="decssl")
    assert "encoder.bn1.weight" in mix.names and "projector.net.1.bias" in mix.names
    assert "encoder.layer1.0.bn1.weight" not in mix.names
    with pytest.raises(ValueError):
        MixableState(net, fedbn="sometimes")


def test_mixable_state_round_trip_is_exact_and_writes_into_buffer():
    net = MoonNet(build_encoder("resnet-small", 1, 28), num_classes=10)
    net.train()
    net(images(8, 1, 28))  # non-trivial BN running stats
    mix = MixableState(net)
    buf = mix.new_buffer()
    ptr = buf.data_ptr()
    out = mix.flatten(buf)
    assert out is buf and out.data_ptr() == ptr and out.shape == (mix.numel,)
    # Independent flattening: concatenation of the named tensors.
    named = dict(net.named_parameters()) | dict(net.named_buffers())
    ref = torch.cat([named[n].detach().reshape(-1).float() for n in mix.names])
    assert torch.equal(out, ref)
    saved = state(net)
    init_model(net, gen(99))  # scramble
    assert not torch.equal(mix.flatten(), ref)
    mix.unflatten_(buf)
    for k, v in net.state_dict().items():
        if v.is_floating_point():
            assert torch.equal(v, saved[k]), k
    # and unflatten -> flatten is the identity on an arbitrary vector
    v = torch.randn(mix.numel, generator=gen(5))
    mix.unflatten_(v)
    assert torch.equal(mix.flatten(buf), v) and buf.data_ptr() == ptr
    with pytest.raises(ValueError):
        mix.flatten(torch.empty(mix.numel + 1))


def test_trainable_only_mixable_state_and_counts():
    net = SupervisedNet(build_encoder("simple-cnn", 1, 28), 10)
    for p in net.encoder.parameters():
        p.requires_grad_(False)
    assert trainable_parameter_names(net) == ["classifier.fc.weight", "classifier.fc.bias"]
    assert count_parameters(net, trainable_only=True) == 84 * 10 + 10
    assert MixableState(net, trainable_only=True).names == trainable_parameter_names(net)


# ------------------------------------------------------------------ deterministic initialisation


@pytest.mark.parametrize(
    "make",
    [
        lambda: SimCLRNet(build_encoder("resnet-small", 3, 32)),
        lambda: MoonNet(build_encoder("simple-cnn", 3, 32), 10),
        lambda: SupervisedNet(build_encoder("vit-tiny", 1, 28, hidden_size=32, depth=1, heads=2), 10),
    ],
    ids=["simclr-resnet-small", "moon-simple-cnn", "vit"],
)
def test_init_model_deterministic_and_leaves_global_rng(make):
    a, b, c = make(), make(), make()
    a.train()
    a(images(4, *( (3, 32) if not isinstance(a, SupervisedNet) else (1, 28))))  # move BN stats off their init
    rng_before = torch.get_rng_state()
    init_model(a, gen(1))
    init_model(b, gen(1))
    init_model(c, gen(2))
    assert torch.equal(torch.get_rng_state(), rng_before)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    differ = [k for k, _ in a.named_parameters() if not torch.equal(sa[k], sc[k])]
    # every randomly initialised tensor differs (BN/LayerNorm affine and zero biases are constants)
    assert len(differ) >= sum(1 for _, p in a.named_parameters() if p.dim() >= 2)
    for _, bn in a.named_modules():
        if isinstance(bn, nn.modules.batchnorm._BatchNorm):
            assert torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))


def test_init_model_rejects_bare_parameters():
    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(3))

    with pytest.raises(ValueError, match="reset_parameters"):
        init_model(nn.Sequential(nn.Linear(2, 2), Bare()), gen(0))


# ------------------------------------------------------------------ Hugging Face + LoRA


@pytest.fixture(scope="module")
def tiny_hf_vit(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)  # test fixture only; library code never touches the global RNG
    model = ViTModel(cfg)
    path = tmp_path_factory.mktemp("hf") / "tiny-vit"
    model.save_pretrained(path)
    return str(path), {k: v.clone() for k, v in model.state_dict().items()}


def test_hf_full_finetune_loads_local_weights(tiny_hf_vit):
    path, ref = tiny_hf_vit
    enc = build_encoder("hf:" + path, 3, 32)
    assert isinstance(enc, HFEncoder) and enc.feat_dim == 32
    for k, v in enc.model.state_dict().items():
        assert torch.equal(v, ref[k]), k
    assert all(p.requires_grad for p in enc.parameters())
    assert enc(images(2, 3, 32)).shape == (2, 32)
    gray = build_encoder("hf:" + path, 1, 28, pool="mean")  # channel repeat + resize to 32
    assert gray(images(2, 1, 28)).shape == (2, 32)


def test_hf_lora_only_adapters_and_head_train(tiny_hf_vit):
    path, ref = tiny_hf_vit
    enc = build_encoder("hf:" + path, 3, 32, lora_rank=4)
    net = SupervisedNet(enc, num_classes=3)
    names = trainable_parameter_names(net)
    assert names and all("lora_" in n or n.startswith("classifier.") for n in names)
    assert any("lora_A" in n for n in names) and any("lora_B" in n for n in names)
    assert {"classifier.fc.weight", "classifier.fc.bias"} <= set(names)
    assert count_parameters(net, trainable_only=True) < count_parameters(net) / 5
    before = state(net)
    opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.5)
    x, y = images(6, 3, 32), torch.tensor([0, 1, 2, 0, 1, 2])
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    after = net.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and changed <= set(names)
    assert any("lora_B" in k for k in changed)
    # explicit target modules work too; a missing one is a ValueError
    enc2 = build_encoder("hf:" + path, 3, 32, lora_rank=2, target_modules=["q_proj", "k_proj", "v_proj"])
    assert any("k_proj.lora_A" in n for n in trainable_parameter_names(enc2))
    with pytest.raises(ValueError):
        build_encoder("hf:" + path, 3, 32, lora_rank=2, target_modules=["no_such_layer"])


def test_hf_lora_init_model_keeps_pretrained_and_redraws_adapters(tiny_hf_vit):
    path, ref = tiny_hf_vit
    a = build_encoder("hf:" + path, 3, 32, lora_rank=4)
    b = build_encoder("hf:" + path, 3, 32, lora_rank=4)
    c = build_encoder("hf:" + path, 3, 32, lora_rank=4)
    rng_before = torch.get_rng_state()
    for m, s in ((a, 7), (b, 7), (c, 8)):
        init_model(m, gen(s))
    assert torch.equal(torch.get_rng_state(), rng_before)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    lora_a = [k for k in sa if "lora_A" in k]
    assert lora_a
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
        if "lora_" not in k:
            assert torch.equal(sa[k], sc[k]), k  # pretrained weights untouched
    assert all(not torch.equal(sa[k], sc[k]) for k in lora_a)
    assert all(torch.count_nonzero(sa[k]) == 0 for k in sa if "lora_B" in k)
    base = {k.replace("model.base_model.model.", "").replace(".base_layer", ""): v
            for k, v in sa.items() if "lora_" not in k}
    for k, v in base.items():
        assert torch.equal(v, ref[k]), k


@pytest.mark.parametrize("shape", [(3, 4, 24, 24), (2, 3, 7, 9), (1, 1, 2, 2)])
def test_fast_max_pool_equals_max_pool2d_without_gradients(shape) -> None:
    """MaxPool2x2 without gradients takes strided maxima: the same values as max_pool2d (NaN propagates, odd
    sizes are floored); with gradients it is max_pool2d itself."""
    import torch.nn.functional as F

    from p2pfl.models.base import MaxPool2x2
    x = torch.randn(shape)
    x[0, 0, 0, 0] = float("nan")
    with torch.no_grad():
        fast = MaxPool2x2()(x)
    ref = F.max_pool2d(x, 2)
    assert torch.equal(fast.isnan(), ref.isnan())
    assert torch.equal(fast.nan_to_num(7.0), ref.nan_to_num(7.0))
    y = torch.randn(shape, requires_grad=True)
    MaxPool2x2()(y).sum().backward()
    z = y.detach().clone().requires_grad_(True)
    F.max_pool2d(z, 2).sum().backward()
    assert torch.equal(y.grad, z.grad)


@pytest.mark.parametrize("channels,size", [(1, 28), (3, 32)])
def test_simple_cnn_is_moons_relu_then_pool_bitwise(channels, size) -> None:
    """SimpleCNN pools before its ReLUs: its features and every parameter's gradient equal MOON's order
    (pool(relu(conv))) bit for bit, ties and all-negative windows included (images with flat regions make
    equal neighbours; a negative bias makes windows whose maximum is not positive)."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    enc = build_encoder("simple-cnn", channels, size)
    with torch.no_grad():
        enc.conv1.bias[:3] = -0.5
    x = torch.rand(8, channels, size, size)
    x[:, :, :, : size // 2] = 0.25  # flat halves: equal neighbours in every window there

    def moon(m, x):
        h = F.max_pool2d(F.relu(m.conv1(x)), 2)
        h = F.max_pool2d(F.relu(m.conv2(h)), 2)
        return F.relu(m.fc2(F.relu(m.fc1(torch.flatten(h, 1)))))

    g = torch.randn(8, enc.feat_dim)
    ours = enc(x)
    grads = torch.autograd.grad(ours, list(enc.parameters()), g)
    ref = moon(enc, x)
    ref_grads = torch.autograd.grad(ref, list(enc.parameters()), g)
    assert torch.equal(ours, ref)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    with torch.no_grad():
        assert torch.equal(enc(x), ref)
