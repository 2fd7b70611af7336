"""Gossip averaging over the neighbour exchange, and the consensus distance of what was mixed."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from p2pfl.byzantine import Robust, aggregate, attack_vector
from p2pfl.comm.exchange import Exchange
from p2pfl.comm.world import World
from p2pfl.network.schedule import HUB, RoundNetwork


def _combine(own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]]) -> torch.Tensor:
    """Σ_j w_j x_j in the row's (ascending) order: bitwise the same whichever ranks the peers sit on."""
    acc = torch.zeros_like(own)
    for j, w in row:
        acc.add_(received[j] if j in received else own, alpha=w)
    return acc


def finite(t: torch.Tensor) -> bool:
    """Whether every value of `t` is finite (no NaN, no ±Inf)."""
    return bool(torch.isfinite(t).all())


def _bad_senders(inbox: dict[int, dict[int, torch.Tensor]], only: set[int] | None = None) -> list[tuple[int, int]]:
    """(receiver, sender) of every non-finite message in `inbox` (receivers restricted to `only`)."""
    return [(p, q) for p, received in inbox.items() if only is None or p in only
            for q, v in received.items() if not finite(v)]


def gossip(exchange: Exchange, net: RoundNetwork, vectors: dict[int, torch.Tensor], round: int,
           sizes: Sequence[float] | None = None, kind: str = "params", robust: Robust | None = None
           ) -> dict[int, torch.Tensor]:
    """x_i ← Σ_j W_ij x_j with the round's weights for every local active peer (`vectors` holds theirs);
    with `sizes`, W_ij is scaled by n_j and the row renormalised. On `--mixing server` the same weights travel
    over the star's two hops (`via_server`).

    A non-finite message is rejected: every rank learns of it (collective), the link counts as failed for the
    round and the weights are recomputed, so the result equals a round in which that link failed. With `robust`,
    attackers (--byzantine) send what their attack says and honest peers combine with the run's aggregator
    (p2pfl.byzantine)."""
    if net.server:
        return via_server(exchange, net, vectors, round, sizes, kind)
    if robust is not None and robust.active:
        return robust_gossip(exchange, net, vectors, round, robust, sizes, kind)
    inbox = exchange.exchange(vectors, round, kind=kind, links=net.incoming)
    mixed = {peer: _combine(vectors[peer], received, net.row(peer, sizes)) for peer, received in inbox.items()}
    suspects = {p for p, v in mixed.items() if not finite(v)}
    rejected = exchange.reject(round, _bad_senders(inbox, suspects), agree=True)
    if rejected:
        net = net.without(rejected)
        mixed = {peer: _combine(vectors[peer], received, net.row(peer, sizes)) for peer, received in inbox.items()}
    return mixed


def robust_gossip(exchange: Exchange, net: RoundNetwork, vectors: dict[int, torch.Tensor], round: int,
                  robust: Robust, sizes: Sequence[float] | None = None, kind: str = "params"
                  ) -> dict[int, torch.Tensor]:
    """Gossip with attackers and a robust aggregator: attackers keep their own vector and send the attack's;
    honest peers combine what they receive with `robust.aggregator` (non-finite messages rejected first). The
    neighbours an aggregator cut are noted on the exchange for the round record."""
    payloads = dict(vectors)
    for p in sorted(vectors):
        if p in robust.byzantine:
            memory = robust.memory.setdefault((p, kind), {})
            payloads[p] = attack_vector(robust.attack, vectors[p], seed=exchange.seed, peer=p, round=round,
                                        scale=robust.scale, heard=memory.get("heard"), first=memory.get("first"))
            memory.setdefault("first", payloads[p].clone())
    inbox = exchange.exchange(payloads, round, kind=kind, links=net.incoming)

    def combine(peer: int, received: dict[int, torch.Tensor], net: RoundNetwork) -> tuple[torch.Tensor, list[int]]:
        if peer in robust.byzantine:
            return vectors[peer], []
        return aggregate(robust, peer, vectors[peer], received, net.row(peer, sizes))

    # Every aggregator's result is non-finite when one of its inputs is (NaN and Inf reach the sum, the min/max
    # or the norm), so only the suspects' messages are checked, as in the plain gossip; attackers check theirs.
    mixed = {peer: combine(peer, received, net) for peer, received in inbox.items()}
    suspects = {p for p, (v, _) in mixed.items() if p in robust.byzantine or not finite(v)}
    rejected = exchange.reject(round, _bad_senders(inbox, suspects), agree=True)
    if rejected:
        net = net.without(rejected)
    out = {}
    for peer, received in inbox.items():
        # A rejected link fails both ways on an undirected graph: keep only what the surviving graph carries.
        kept = {q: v for q, v in received.items() if q in net.incoming.get(peer, ())} if rejected else received
        if rejected:  # the weights of the surviving graph may change every row, as in the plain gossip
            mixed[peer] = combine(peer, kept, net)
        if peer in robust.byzantine:
            robust.memory[(peer, kind)]["heard"] = [v.clone() for v in kept.values()]
        out[peer], cut = mixed[peer]
        exchange.cut += [(peer, q) for q in cut]
    return out


def via_server(exchange: Exchange, net: RoundNetwork, vectors: dict[int, torch.Tensor], round: int,
               sizes: Sequence[float] | None = None, kind: str = "params") -> dict[int, torch.Tensor]:
    """The star as a server: the leaves the hub reaches send it their vectors, the hub averages them with its
    own (the row of W, data-weighted with `sizes`) and sends the average back, all in this round. Every byte
    is counted where it travels: a leaf sends and receives one vector, the hub as many as it serves. A leaf
    whose vector is not finite is left out of the average and gets nothing back (its link failed)."""
    hub = HUB
    members = [j for j, _ in net.row(hub)] if hub in net.active else []
    up = {hub: tuple(j for j in members if j != hub)} if len(members) > 1 else {}
    inbox = exchange.exchange(vectors, round, kind=kind, links=up)
    rejected = exchange.reject(round, _bad_senders(inbox), agree=True)
    if rejected:
        net = net.without(rejected)
        up = {hub: tuple(j for j, _ in net.row(hub) if j != hub)} if hub in net.active else {}
    average: dict[int, torch.Tensor] = {}
    if hub in inbox:
        average[hub] = _combine(vectors[hub], inbox[hub], net.row(hub, sizes))
    down = {j: (hub,) for j in up.get(hub, ())}
    back = exchange.exchange({**vectors, **average}, round, kind=kind, links=down)
    out = {p: v.clone() for p, v in vectors.items()}
    out.update(average)
    for leaf, received in back.items():
        out[leaf] = received[hub].clone()
    return out


def pull(exchange: Exchange, net: RoundNetwork, vectors: dict[int, torch.Tensor], round: int,
         peers: Iterable[int], sizes: Sequence[float] | None = None, kind: str = "params") -> dict[int, torch.Tensor]:
    """For each of `peers` (the rejoining ones), the mix of its fresh in-neighbours' vectors with its own
    weight left out and the row renormalised: a returning peer takes the current neighbourhood model, as a
    FedAvg client takes the current global one. A peer with no fresh neighbour this round is left out;
    non-finite vectors are rejected."""
    links = {i: tuple(j for j in net.incoming[i] if j in net.fresh) for i in sorted(peers)}
    inbox = exchange.exchange(vectors, round, kind=kind, links=links)
    rejected = exchange.reject(round, _bad_senders(inbox))
    out = {}
    for peer, received in inbox.items():
        row = [(j, w) for j, w in net.row(peer, sizes) if j in received and (peer, j) not in rejected]
        if row:
            total = sum(w for _, w in row)
            out[peer] = _combine(vectors[peer], received, [(j, w / total) for j, w in row])
    return out


def exact_mean(world: World, vectors: dict[int, torch.Tensor], n_peers: int,
               like: torch.Tensor | None = None) -> torch.Tensor:
    """The average over the `n_peers` peers whose vectors the ranks hold, summed exactly in fixed point (int64),
    so that the result does not depend on which rank holds which peer or on the order of the reduction.
    Collective; a rank holding none (its peers crashed) passes `like`, a tensor of the vectors' shape."""
    sample = next(iter(vectors.values())) if vectors else like
    assert sample is not None, "exact_mean: a rank without vectors passes like="
    local_max = max(float(v.abs().max()) for v in vectors.values()) if vectors else 0.0
    global_max = world.allreduce_max(local_max)
    if global_max == 0.0 or not math.isfinite(global_max):
        return torch.zeros_like(sample, dtype=torch.float64) + (global_max if not math.isfinite(global_max) else 0)
    shift = 61 - math.ceil(math.log2(global_max * n_peers))
    total = torch.zeros(sample.numel(), dtype=torch.int64)
    for peer in sorted(vectors):
        total += torch.round(torch.ldexp(vectors[peer].detach().reshape(-1).double().cpu(),
                                         torch.tensor(float(shift), dtype=torch.float64))).long()
    world.allreduce_sum_(total.numpy())
    mean = torch.ldexp(total.double(), torch.tensor(float(-shift), dtype=torch.float64)) / n_peers
    return mean.reshape(sample.shape)


def consensus_distance(world: World, vectors: dict[int, torch.Tensor], n_peers: int,
                       like: torch.Tensor | None = None) -> float | None:
    """(1/K) Σ_i ‖x_i − x̄‖² / ‖x̄‖² over the K = `n_peers` peers whose vectors the ranks hold (SPEC §2);
    collective, the value is returned on rank 0 only. A rank holding none passes `like` (see exact_mean)."""
    mean = exact_mean(world, vectors, n_peers, like)
    denom = float(mean.pow(2).sum())
    parts = {p: float((v.detach().reshape(mean.shape).double().cpu() - mean).pow(2).sum())
             for p, v in vectors.items()}
    gathered = world.gather(parts)
    if gathered is None:
        return None
    merged: dict[int, float] = {}
    for part in gathered:
        merged.update(part)
    total = 0.0
    for p in sorted(merged):
        total += merged[p]
    return total / n_peers / denom if denom > 0 else float("inf") if total > 0 else 0.0
