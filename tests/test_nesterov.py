"""--nesterov: Nesterov momentum for the local SGD steps. The peer-stacked optimiser equals
torch.optim.SGD(nesterov=True) per peer; a FedAvg run trained peer-stacked (--batch-peers on) equals the
peer-by-peer loop with it; the settings it cannot mean are refused in one line."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from p2pfl.config import ConfigError, make_config
from p2pfl.stacked_optim import StackedOptimizer

from helpers_inproc import setup_algorithm

P, SHAPES, MU, LR, WD = 3, [(4, 3), (3,)], 0.9, 0.1, 1e-3


def test_stacked_equals_torch_nesterov_per_peer() -> None:
    """Six steps with random gradients, the last peer idle in two of them: each peer's parameters equal its own
    torch.optim.SGD(momentum=0.9, nesterov=True, weight_decay=1e-3), and differ from plain momentum's."""
    gen = torch.Generator().manual_seed(0)
    stacked = [torch.randn(P, *s, generator=gen) for s in SHAPES]
    plain = [t.clone() for t in stacked]
    peers = [[torch.nn.Parameter(t[i].clone()) for t in stacked] for i in range(P)]
    torch_opts = [torch.optim.SGD(ps, lr=LR, momentum=MU, nesterov=True, weight_decay=WD) for ps in peers]
    opt = StackedOptimizer(stacked, "sgd", lr=LR, momentum=MU, weight_decay=WD, nesterov=True)
    heavy = StackedOptimizer(plain, "sgd", lr=LR, momentum=MU, weight_decay=WD)
    for n in [3, 3, 2, 3, 2, 3]:
        grads = [torch.randn(P, *s, generator=gen) for s in SHAPES]
        opt.step(grads, n)
        heavy.step(grads, n)
        for i in range(n):
            for p, g in zip(peers[i], grads):
                p.grad = g[i].clone()
            torch_opts[i].step()
        for i in range(P):
            for t, p in zip(stacked, peers[i]):
                torch.testing.assert_close(t[i], p.detach(), rtol=1e-6, atol=1e-7)
    assert (stacked[0] - plain[0]).abs().max() > 1e-3
    opt.load_from(torch_opts, peers)  # the same settings: accepted
    with pytest.raises(ValueError, match="nesterov"):
        heavy.load_from(torch_opts, peers)


def test_stacked_refuses_nesterov_without_momentum() -> None:
    with pytest.raises(ValueError, match="Nesterov"):
        StackedOptimizer([torch.zeros(P, 2)], "sgd", lr=LR, nesterov=True)
    with pytest.raises(ValueError, match="Nesterov"):
        StackedOptimizer([torch.zeros(P, 2)], "adam", lr=LR, momentum=MU, nesterov=True)


SMALL = {"peers": 4, "local_steps": 5, "batch_size": 16, "train_subset": 300,
         "optimizer": "sgd", "lr": 0.05, "momentum": 0.9}


def _first_round(out: Path, **options) -> tuple[dict[int, list[float]], list[torch.Tensor]]:
    algo = setup_algorithm(out, algorithm="fedavg", **SMALL, **options)
    assert (algo.batched is not None) == (options["batch_peers"] == "on")
    algo.step_losses = {}
    net = algo.ctx.schedule.at(1)
    algo.local_updates(sorted(algo.peers), 1, net)
    if algo.batched is None:
        assert all(g["nesterov"] == options.get("nesterov", False) for peer in algo.peers.values()
                   for g in peer.optimizer.param_groups)
    models = [torch.cat([w.detach().flatten() for w in algo.peers[p].model.parameters()]) for p in sorted(algo.peers)]
    return algo.step_losses, models


def test_fedavg_batched_equals_the_loop_with_nesterov(tmp_path: Path) -> None:
    """One round from the same start, float32: every step's loss within 2e-5 and the models within 1e-5 between
    the peer-stacked and the peer-by-peer path, both with Nesterov; plain momentum moves the models elsewhere."""
    loop_losses, loop = _first_round(tmp_path / "off", batch_peers="off", nesterov=True)
    stacked_losses, stacked = _first_round(tmp_path / "on", batch_peers="on", nesterov=True)
    _, heavy = _first_round(tmp_path / "heavy", batch_peers="on")
    assert all(len(v) == 5 for v in loop_losses.values())
    for p, losses in loop_losses.items():
        torch.testing.assert_close(torch.tensor(stacked_losses[p]), torch.tensor(losses), rtol=2e-5, atol=1e-6)
    for a, b, c in zip(loop, stacked, heavy):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        assert (c - a).abs().max() > 1e-4


@pytest.mark.parametrize("options,names", [
    ({"algorithm": "fedavg", "optimizer": "sgd", "momentum": 0.0}, ("--momentum > 0",)),
    ({"algorithm": "fedavg", "optimizer": "adam"}, ("--optimizer sgd", "adam")),
    ({"algorithm": "dec-sl", "optimizer": "sgd", "gossip": "qgm"}, ("qgm", "μ")),
    ({"algorithm": "quadratic"}, ("quadratic", "False")),
])
def test_refusals(options: dict, names: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as exc:
        make_config(nesterov=True, peers=4, **options)
    message = str(exc.value)
    assert message.startswith("--nesterov:") and "\n" not in message and all(n in message for n in names), message


def test_off_by_default_and_taken_by_sgd() -> None:
    from p2pfl.optim import make_optimizer
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert make_optimizer(params, make_config(algorithm="fedavg", optimizer="sgd")).param_groups[0]["nesterov"] is False
    cfg = make_config(algorithm="fedavg", optimizer="sgd", nesterov=True)
    assert make_optimizer(params, cfg).param_groups[0]["nesterov"] is True
