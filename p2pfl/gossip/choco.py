"""CHOCO-SGD (Koloskova et al. 2019, 2020; SPEC §8): compressed gossip with error feedback through public copies.

Peer i keeps x̂_i, the public copy of itself its neighbours hold too (state "hat"), and its copy of each
neighbour's (state "hat<j>"); all start at 0. A round: x½_i = x_i − ηg_i; q_i = Q(x½_i − x̂_i) travels (the
--compress codec); every peer adds q_j to its copy of x̂_j for j ∈ N(i) ∪ {i}; then

    x_i⁺ = x½_i + γ Σ_j W_ij (x̂_j − x̂_i) = (x½_i − x̂_i) + γ Σ_j W_ij x̂_j + (1 − γ) x̂_i    (W row-stochastic),

γ = --consensus-step. The second form is what is computed: with the dense codec (--compress none) the message is
x½_i itself and the copies are set to it (x̂ + (x½ − x̂) without its rounding), so with γ = 1 the first and last
terms are exact zeros and the round is plain gossip bit for bit.

So far on a fixed network only (config refuses link failures, churn, partial participation, crashes and changing
graphs): a link that fails would leave the two copies of x̂ apart (SPEC §8), which this first version does not yet
repair. A message rejected as non-finite is not added by its receivers, so their copy of the sender parts from the
sender's own.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import weighted_sum
from p2pfl.network.schedule import RoundNetwork


def check_choco(kind: str, directed: bool) -> None:
    """Refuse before training a choco run on a graph that changes or has one-way links (see the module docstring)."""
    if kind != "static" or directed:
        raise ValueError(f"--gossip choco: keeps its public copies on a fixed undirected network only so far, but this "
                         f"network is {kind}{' and one-way' if directed else ''}; use a static topology")


def choco(gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float, gamma: float,
          state: dict[int, dict[str, torch.Tensor]], net: RoundNetwork, round: int,
          sizes: Sequence[float] | None = None) -> Mixed:
    """One CHOCO round for the local active peers (`x`, `g`: their models and gradients); `state[p]` is updated
    in place."""
    dense = gossip.compressor is None
    half = {p: x[p] - lr * g[p] for p in x}
    sent = {p: half[p] if dense else half[p] - state[p].get("hat", torch.zeros_like(half[p])) for p in x}
    got = gossip.checked.exchange(sent, round, net.incoming, net=net, codec=gossip.compressor)
    for p in x:
        s = state[p]
        s["hat"] = half[p] if dense else s.get("hat", torch.zeros_like(half[p])) + gossip.own_copy(p, sent[p], round)
        for j, q in got.kept(p).items():
            s[f"hat{j}"] = q.clone() if dense else s.get(f"hat{j}", torch.zeros_like(q)) + q
    got.release()
    assert got.net is not None
    mixed = {}
    for p in x:
        s = state[p]
        copies = {j: s[f"hat{j}"] for j in got.net.incoming.get(p, ()) if f"hat{j}" in s}
        mixed[p] = (half[p] - s["hat"]) + gamma * weighted_sum(s["hat"], copies, got.net.row(p, sizes)) \
            + (1 - gamma) * s["hat"]
    return Mixed(mixed, got.net, got.events)
