"""A method of one's own, as a plug-in: lazy consensus, gossip averaging that moves only part of the way.

    python -m p2pfl.run --plugin examples/plugins/method.py --algorithm lazy-consensus --lazy-step 0.5 ...

Each round a peer keeps (1 - λ) of its vector and takes λ of its neighbours' mix: x ← (1 - λ) x + λ W x. The
lazy walk's W' = (1 - λ) I + λ W has the eigenvalues 1 - λ + λ μ of W's μ, so on the complete graph with uniform
weights (W x = the mean) the distance to the mean shrinks by exactly (1 - λ) a round, where plain consensus
reaches the mean at once. A method is an `Algorithm` registered with `register_method`; its options are a
`method_options` section beside it (flags, YAML keys, `--help`), their ranges `bounds`; what it cannot do it
`lacks`, with why, and `allowed` narrows other options to the values it runs with.
"""
from __future__ import annotations

from typing import Any, ClassVar

from p2pfl.algorithms import register_method
from p2pfl.algorithms.consensus import Consensus
from p2pfl.method import ASYNCHRONOUS, Phase
from p2pfl.network import RoundNetwork
from p2pfl.options import method_options, opt


@method_options("lazy-consensus")
class LazyOptions:
    """How far a lazy-consensus peer moves towards its neighbours' mix each round."""

    lazy_step: float = opt(0.5, "lazy-consensus: the share λ of the neighbours' mix a peer takes a round",
                           section="lazy-consensus", bounds="(0, 1]")


@register_method("lazy-consensus")
class LazyConsensus(Consensus):
    """Consensus (random vectors, no training) through the lazy walk (1 - λ) I + λ W."""

    #: The lazy step blends plain mixes: not the de-biased schemes, not the pairwise averages of --mode async.
    allowed: ClassVar[dict[str, tuple[Any, ...]]] = {"gossip": ("average",)}
    lacks: ClassVar[dict[str, str]] = {ASYNCHRONOUS: "its lazy step belongs to a synchronous round"}

    def communicate(self, round: int, net: RoundNetwork) -> Phase:
        before = {p: peer.x for p, peer in self.peers.items() if p in net.active}
        phase = super().communicate(round, net)  # each active peer's x is now its neighbours' mix
        step = self.cfg.lazy_step
        for p, x in before.items():
            self.peers[p].x = (1.0 - step) * x + step * self.peers[p].x
        return phase
