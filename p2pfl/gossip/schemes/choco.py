"""CHOCO-SGD (Koloskova et al. 2019, 2020; SPEC §8): compressed gossip with error feedback through public copies.

Peer i keeps x̂_i, the public copy of itself its neighbours hold too (state "hat"), and its copy of each
neighbour's (state "in<j>"); all start at 0. A round: x½_i = x_i − ηg_i; q_i = Q(x½_i − x̂_i) travels (the
--compress codec); x̂_i += q_i, and every neighbour adds q_i to its copy; then, over the links the round carried,

    x_i⁺ = x½_i + γ Σ_j W_ij (x̂_j − x̂_i) = (x½_i − x̂_i) + γ Σ_j W_ij x̂_j + (1 − γ) x̂_i    (W row-stochastic),

γ = --consensus-step. The second form is what is computed. With the dense codec (--compress none) the message is
x½_i itself and the copies are set to it, so with γ = 1 the first and last terms are exact zeros and the round is
plain gossip bit for bit, on any network.

Copies kept equal on networks that fail and change. A neighbour that misses a message (its link failed, either
end sat out, the message was rejected, or the link is new on a resampled graph) would hold a copy apart from the
sender's, and the network mean would drift (SPEC §8). So the sender tracks, per neighbour, the last round after
which that neighbour's copy equalled x̂_i (state "since") and logs its recent messages ("log<round>", at most a
dense vector's bytes of them). A link is synced when the neighbour holds x̂_i as it was before this round: it gets
the round's message, one broadcast for all synced links. A lagging link gets a bundle
(p2pfl.gossip.compress.bundle): the messages it missed and this round's, replayed in order, or, when those are no
longer logged or would cost more, the new x̂_i itself, dense. Either way, once a link delivers, both ends hold the
same x̂_i bit for bit, so with a doubly stochastic W the gossip step keeps the network mean exactly. A link comes
back at most one dense message dearer; all of it is counted in bytes_sent. A message is applied only on a link the
round's final network still carries (a rejection fails its link both ways), at both ends alike.

Memory per peer: x̂_i, one copy per neighbour it has ever had, and the log (at most one dense vector).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import networkx as nx
import torch

from p2pfl.comm.transport import Inbox
from p2pfl.gossip.checked import finite
from p2pfl.gossip.codec import Codec, Poisoned, Wrapping
from p2pfl.gossip.compress import bundle
from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import weighted_sum
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import (
    COMPRESSIBLE,
    ERROR_FEEDBACK,
    MIXES_BY_W,
    MULTI_STEP,
    UPDATED_ONLY,
    MultiStep,
    State,
)
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import opt

if TYPE_CHECKING:
    from p2pfl.network import NetworkSchedule


class _Encoded(Wrapping):
    """The exchange's codec for payloads CHOCO encoded itself (once, for its own copy and every receiver)."""

    def encode(self, peer: int, vector: torch.Tensor, round: int) -> torch.Tensor:
        return vector


def _int(s: State, key: str) -> int:
    return int(s[key]) if key in s else -1


def _log(s: State) -> list[int]:
    """The logged rounds, oldest first."""
    return sorted(int(k[3:]) for k in s if k.startswith("log"))


def _trim(s: State, needed: int, cap: int) -> None:
    """Drop the logged messages of rounds up to `needed` (every neighbour holds them), then the oldest while the
    log holds more than `cap` bytes; "dropped" is the newest round dropped (a link behind it gets a reset)."""
    rounds = _log(s)
    total = sum(s[f"log{r}"].numel() for r in rounds)
    for r in rounds:
        if r > needed and total <= cap:
            break
        total -= s.pop(f"log{r}").numel()
        s["dropped"] = torch.tensor(max(r, _int(s, "dropped")))


def _bundle(s: State, since: int, now: torch.Tensor, round: int, copy: torch.Tensor) -> torch.Tensor:
    """What a lagging link gets: the logged messages after round `since`, then `now`, or the reset to `copy`."""
    if since >= _int(s, "dropped"):
        missed = [(r, s[f"log{r}"]) for r in _log(s) if since < r < round] + [(round, now)]
        if bundle.size([m.numel() for _, m in missed]) <= bundle.reset_size(copy.numel(), copy.dtype):
            return bundle.replay(missed)
    return bundle.reset(copy)


def choco_round(gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float, gamma: float,
                state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None,
                support: nx.Graph | None = None) -> Mixed:
    """One CHOCO round for the local active peers (`x`, `g`: their models and gradients; g = 0 for CHOCO-gossip);
    `state[p]` is updated in place (module docstring). `support`: every link a round may use (a sender keeps the
    messages its alive neighbours there still miss; None: every pair)."""
    half = {p: x[p] - lr * g[p] for p in x}
    exchanges = gossip.exchanges(net, round)
    if gossip.compressor is None:
        got = exchanges.start(half).result()
        assert got.net is not None
        mixed = {p: _update(half[p], half[p], got.kept(p), gamma, got.net, p, sizes) for p in x}
        got.release()
        return Mixed(mixed, got.net, got.events)
    codec = gossip.compressor
    assert isinstance(codec, Poisoned)
    inner = codec.inner
    sent, hat = {}, {}
    for p in x:
        s = state[p]
        old = s.get("hat", torch.zeros_like(half[p]))
        clean = inner.encode(p, half[p] - old, round)
        sent[p] = codec.encode(p, half[p] - old, round) if p in codec.peers else clean
        hat[p] = old + inner.decode(p, clean, round)
        s[f"log{round}"] = clean  # a lagging link's replay holds it; dropped at the end once nobody needs it
    # which links lag (their receiver holds an older x̂ than the last one): known to every rank
    lagging = {(j, i) for i in x if "changed" in state[i] for j in net.incoming.get(i, ())  # "since" comes with it
               if int(state[i]["since"][j]) < int(state[i]["changed"])}
    lagging = {tuple(pair) for part in gossip.world.allgather(sorted(lagging)) for pair in part}
    synced = {j: tuple(i for i in senders if (j, i) not in lagging) for j, senders in net.incoming.items()}
    # the synced links' messages and every lagging link's bundle travel together (one agreement for all)
    first = exchanges.start(sent, {j: s for j, s in synced.items() if s}, codec=_Encoded(codec))
    replaced: dict[int, dict[int, torch.Tensor]] = {p: {} for p in x}  # receiver -> sender -> the new copy

    def opened(inbox: Inbox) -> list[tuple[int, int]]:
        """Open each bundle into its receiver's new copy of the sender's x̂; reject one that opens non-finite."""
        bad = []
        for j, received in inbox.items():
            for i, payload in received.items():
                copy = _opened(codec, i, payload, state[j].get(f"in{i}", torch.zeros_like(half[j])))
                if finite(copy):
                    replaced[j][i] = copy
                else:
                    bad.append((j, i))
        return bad

    behind = {i: sorted(j for j, sender in lagging if sender == i) for i in range(net.n_peers)}
    bundles = []
    for slot in range(max(map(len, behind.values()), default=0)):
        vectors = {i: _bundle(state[i], int(state[i]["since"][behind[i][slot]]), sent[i], round,
                              torch.full_like(hat[i], float("nan")) if i in codec.peers else hat[i])
                   for i in x if len(behind[i]) > slot}
        links: dict[int, list[int]] = {}
        for i, js in behind.items():
            if len(js) > slot:
                links.setdefault(js[slot], []).append(i)
        bundles.append(exchanges.start(vectors, {j: tuple(s) for j, s in sorted(links.items())}, judge=opened,
                                       codec=Codec()))
    arrived = {p: dict(first.result().inbox.get(p, {})) for p in x}  # receiver -> sender -> q (to add to its copy)
    for started in bundles:
        started.result().release()
    final = exchanges.net
    assert final is not None
    mixed = {}
    for p in x:
        s = state[p]
        alive = final.incoming.get(p, ())
        for j in alive:  # what p received; a link the final network dropped is applied at neither end
            s[f"in{j}"] = replaced[p][j] if j in replaced[p] else s.get(f"in{j}", torch.zeros_like(half[p])) \
                + arrived[p][j]
        since = s.get("since", torch.full((net.n_peers,), -1)).clone()
        since[list(alive)] = round  # what p's neighbours received
        s["since"], s["changed"], s["hat"] = since, torch.tensor(round), hat[p]
        nbrs = support.neighbors(p) if support is not None else (j for j in range(net.n_peers) if j != p)
        _trim(s, min((int(since[j]) for j in nbrs if j in net.alive), default=round),
              hat[p].numel() * hat[p].element_size())
        mixed[p] = _update(half[p], hat[p], {j: s[f"in{j}"] for j in alive}, gamma, final, p, sizes)
    first.result().release()
    return Mixed(mixed, final, exchanges.events)


def _opened(codec: Codec, sender: int, payload: torch.Tensor, copy: torch.Tensor) -> torch.Tensor:
    """The receiver's new copy of `sender`'s x̂ from a lagging link's bundle: the reset, or `copy` plus the
    replayed messages in the order the sender added them (so both ends round alike)."""
    opened = bundle.open_(payload.to(copy.device), copy)  # a rank that sent nothing here receives on the CPU
    if isinstance(opened, torch.Tensor):
        return opened
    for r, message in opened:
        copy = copy + codec.decode(sender, message, r)
    return copy


def _update(half: torch.Tensor, hat: torch.Tensor, copies: dict[int, torch.Tensor], gamma: float,
            net: RoundNetwork, peer: int, sizes: Sequence[float] | None) -> torch.Tensor:
    """x⁺ = (x½ − x̂) + γ Σ_j W_ij x̂_j + (1 − γ) x̂ over the row of the network the round ended on."""
    return (half - hat) + gamma * weighted_sum(hat, copies, net.row(peer, sizes)) + (1 - gamma) * hat


@SCHEMES.register("choco")
class Choco(MultiStep):
    """CHOCO-SGD with γ = --consensus-step over --compress's codec (dense: plain gossip); with G = 0 (consensus)
    CHOCO-gossip. Its round with g = 0 is exactly a CHOCO-gossip step (x½ = x), so --gossip-steps repeats it:
    dense only (with a codec, the base refuses: its message log and the codec's draws are keyed by the round)."""

    needs: ClassVar[frozenset[str]] = frozenset({MIXES_BY_W})
    capabilities: ClassVar[frozenset[str]] = frozenset({COMPRESSIBLE, ERROR_FEEDBACK, UPDATED_ONLY, MULTI_STEP})
    paper: ClassVar[str | None] = "Koloskova et al. 2019, CHOCO-SGD"

    class Options:
        consensus_step: float = opt(1.0, "CHOCO's consensus step γ in (0, 1] (--gossip choco)", section="compression",
                                    bounds="(0, 1]")

    def __init__(self, gamma: float = 1.0, support: nx.Graph | None = None) -> None:
        self.gamma, self.support = gamma, support

    @classmethod
    def from_config(cls, cfg: Any) -> Choco:
        return cls(cfg.consensus_step)

    @classmethod
    def check_network(cls, schedule: NetworkSchedule, graph: nx.Graph, rounds: int) -> None:
        """Refuse one-way links: a peer's copy of itself as a neighbour holds it is tracked per link, both ways."""
        if schedule.directed:
            raise ValueError("--gossip choco: keeps its public copies on undirected links, but this network is "
                             "one-way; use an undirected topology")

    def prepare(self, ctx: Any) -> None:
        self.support = ctx.graph  # every link a round may use: a sender keeps what its neighbours there miss

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        return choco_round(gossip, x, g, lr, self.gamma, state, net, round, sizes, self.support)
