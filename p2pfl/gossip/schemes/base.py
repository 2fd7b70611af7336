"""What a decentralised optimiser is (`Scheme`): the round it does with the network, its rules on the rest of the
configuration and on the network, its run-level state and records, and the capabilities other parts ask about
instead of its name."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from p2pfl.byzantine import AGGREGATORS
from p2pfl.capabilities import GIVES_GRADIENTS, MIXES_BY_W
from p2pfl.gossip.compress import CODECS
from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.network.schedule import CHECK_HORIZON, RoundNetwork
from p2pfl.options import Check, catalogue, method_options, opt
from p2pfl.registry import Component, Registry

if TYPE_CHECKING:
    import networkx as nx

    from p2pfl.network import NetworkSchedule

State = dict[str, torch.Tensor]
#: A column of W summing to 1 within this is stochastic (rounding of 1/(1 + in-degree) over a column).
COLUMN_TOLERANCE = 1e-9

#: The schemes, by their --gossip name (Scheme subclasses, one file each in this package, whose modules the registry
#: imports when first asked; a plug-in registers its own).
SCHEMES: Registry[Any] = Registry("gossip scheme", option="gossip", package="p2pfl.gossip.schemes")


#: The scheme capabilities other parts ask about (a scheme declares the ones it has in `capabilities`):
#: its round is the network's plain W-weighted mix, which a method may run as Gossip.mix (--mixing server, --byzantine
#: and robust --aggregators apply); the only scheme --mode async runs (pairwise averaging) ...
PLAIN_MIX = "plain-mix"
#: ... --compress encodes its messages (p2pfl.gossip.compress) ...
COMPRESSIBLE = "compressible"
#: ... it corrects what compression drops itself (CHOCO's public copies) ...
ERROR_FEEDBACK = "error-feedback"
#: ... it holds a numerator x and a weight w, its model is z = x/w (`model`, `numerator`, `weight`) ...
DEBIASED = "debiased"
#: ... a peer back from sitting out may not take its neighbours' mix (it would create or destroy mass) ...
NO_REJOIN_MIX = "no-rejoin-mix"
#: ... --momentum is its own μ, applied once a round: the local SGD steps run without momentum ...
OWNS_MOMENTUM = "owns-momentum"
#: ... its fixed point is exact only under a doubly stochastic W (warned of on one-way links that fail) ...
DOUBLY_STOCHASTIC = "doubly-stochastic"
#: ... its round reads only the updated model x½ = x − ηg: a method hands it x½ as it is, with g = 0 (not x and a
#: G rebuilt from the update, which would round x½ differently).
UPDATED_ONLY = "updated-only"
#: ... its round with g = 0 is a pure gossip step (its state holds no gradient that would advance), so it may repeat
#: on the round's network: --gossip-steps S > 1 (e.g. push-sum's two-step variant; `Scheme.rounds`).
MULTI_STEP = "multi-step"


class Scheme(Component):
    """A --gossip scheme, built once per run from the configuration (`from_config`). A round reads the local active
    peers' models x (before their local update), their gradients g (the update divided by −η), the state each peer
    keeps (a dict in its record, so checkpoints keep it) and the round's network, and returns the mixed models."""

    #: The method capabilities (p2pfl.capabilities) it needs, MIXES_BY_W and GIVES_GRADIENTS: a method without them
    #: refuses it.
    needs: ClassVar[frozenset[str]] = frozenset({MIXES_BY_W, GIVES_GRADIENTS})

    @classmethod
    def from_config(cls, cfg: Any) -> Scheme:
        """The scheme a run's configuration asks for, with its own options."""
        return cls()

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        """One round for the local active peers of `x`: their mixed models, the network the exchanges left and
        their events; `state[p]` (the peer's record's dict) is updated in place."""
        raise NotImplementedError

    def rounds(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
               state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None,
               steps: int = 1) -> Mixed:
        """`round`, then `steps` − 1 more with g = 0, pure gossip steps (--gossip-steps; a MULTI_STEP scheme's), each
        on the network the one before left: the round's network, one draw of its failures, less the links whose
        messages were rejected. The events of all of them."""
        mixed = self.round(gossip, x, g, lr, state, net, round, sizes)
        for _ in range(steps - 1):
            zero = {p: torch.zeros_like(v) for p, v in mixed.vectors.items()}
            more = self.round(gossip, mixed.vectors, zero, lr, state, mixed.net, round, sizes)
            mixed = Mixed(more.vectors, more.net, mixed.events + more.events)
        return mixed

    def round_models(self, gossip: Gossip, z: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
                     state: dict[int, State], net: RoundNetwork, round: int,
                     sizes: Sequence[float] | None = None, steps: int = 1) -> Mixed:
        """`rounds` where `z` holds the models the peers hold (`model`), and so do the mixed vectors returned (the
        learners and consensus keep in a peer's model what it trains, evaluates and checkpoints)."""
        return self.rounds(gossip, z, g, lr, state, net, round, sizes, steps)

    def model(self, x: torch.Tensor, state: State) -> torch.Tensor:
        """The model a peer holds, trains and is measured by, from the iterate `x` it mixes."""
        return x

    def numerator(self, z: torch.Tensor, state: State) -> torch.Tensor:
        """The iterate a peer mixes, from the model `z` it holds (`model`'s inverse)."""
        return z

    @staticmethod
    def weight(state: State, like: torch.Tensor) -> torch.Tensor:
        """The weight w of a peer's mass, a one-element tensor like `like` (DEBIASED: model = iterate / w); 1 for
        a scheme whose iterate is its model."""
        return torch.ones(1, dtype=like.dtype, device=like.device)

    def prepare(self, ctx: Any) -> None:
        """Its run-level state and manifest records, once the run's graph is built (p2pfl.run.build_context)."""

    def round_metrics(self, round: int, net: RoundNetwork) -> dict[str, Any] | None:
        """Numbers the scheme adds to round `round`'s record after the round (a privacy ledger's running totals;
        rank 0's are recorded); None, the default, adds none, so the records stay as they were."""
        return None

    def summary(self) -> dict[str, Any]:
        """Entries the scheme adds to summary.json at the run's end (rank 0's are written); none by default."""
        return {}

    def arrays(self) -> dict[str, np.ndarray]:
        """Arrays the runner writes into the run folder at the run's end, by file name (`<name>.npy`; rank 0's);
        none by default."""
        return {}

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """Its rules on the rest of the configuration: the method must hand it what it `needs`, and only the plain
        mix combines with Byzantine peers, robust aggregators, the server and asynchrony. A scheme with rules of
        its own extends this (super().check first)."""
        method = catalogue().get(cfg.algorithm, cfg)
        missing = sorted(cls.needs - method.capabilities, key=lambda c: c != MIXES_BY_W)
        if missing:
            allowed = [n for n in SCHEMES.names() if SCHEMES.get(n).needs <= method.capabilities]
            check(False, "gossip", f"{cfg.algorithm} mixes by {', '.join(allowed)} only, got '{cfg.gossip}': "
                                   f"{method.why_not(missing[0])} (every scheme runs with --algorithm quadratic)")
        plain = PLAIN_MIX in cls.capabilities
        linear = "linear" in AGGREGATORS.get(cfg.aggregator).capabilities
        check(plain or (cfg.byzantine is None and linear and cfg.mixing != "server"), "gossip",
              f"{cfg.gossip} mixes by the plain W-weighted mean: it does not combine with --byzantine, a robust "
              "--aggregator or --mixing server")
        if cfg.gossip_steps > 1:
            cls.check_steps(cfg, check, method, linear)

    @classmethod
    def check_steps(cls, cfg: Any, check: Check, method: Any, linear: bool) -> None:
        """The rules of --gossip-steps S > 1: a scheme whose round with g = 0 is a pure gossip step (MULTI_STEP),
        a method that hands it its one vector, and the plain dense mix (the codecs' random draws, CHOCO's message
        log and the attackers' draws are keyed by the round, so a second step in it would repeat them)."""
        multi = [n for n in SCHEMES.names() if MULTI_STEP in SCHEMES.get(n).capabilities]
        check(MULTI_STEP in cls.capabilities, "gossip_steps",
              f"only {', '.join(multi)} repeat a gossip step with g = 0, got --gossip {cfg.gossip} (its state would "
              "advance): use --gossip-steps 1")
        check(method.can(MIXES_BY_W), "gossip_steps",
              f"{cfg.algorithm} hands a scheme no one vector to mix ({method.why_not(MIXES_BY_W)}): use "
              "--gossip-steps 1")
        check("dense" in CODECS.get(cfg.compress).capabilities, "gossip_steps",
              "repeats the round's dense mix: not with --compress (its draws are keyed by the round)")
        check(cfg.byzantine is None and linear and cfg.mixing != "server", "gossip_steps",
              "repeats the plain W-weighted mix: not with --byzantine, a robust --aggregator or --mixing server")

    @classmethod
    def check_network(cls, schedule: NetworkSchedule, graph: nx.Graph, rounds: int) -> None:
        """Refuse before training, in a ValueError of one line naming --gossip, a network it cannot run on; by
        default it runs on any, except that a scheme exact only under a doubly stochastic W is refused on one-way
        links whose W is only row-stochastic with every peer and link up (EL-Local's uneven in-degrees; failures are
        warned of, `warning`)."""
        if DOUBLY_STOCHASTIC not in cls.capabilities or not schedule.directed:
            return
        for t in range(1, min(rounds, CHECK_HORIZON) + 1):
            drift = schedule.column_drift(t)
            if drift > COLUMN_TOLERANCE:
                raise ValueError(f"--gossip {cls.name}: needs a doubly stochastic W, but --topology {schedule.kind} "
                                 f"makes round {t}'s only row-stochastic (a column sums to 1 ± {drift:.3g}); use "
                                 "--gossip push-sum or an undirected topology")

    @classmethod
    def check_weights(cls, weights: Sequence[np.ndarray | sp.spmatrix]) -> None:
        """Refuse mixing weights it cannot converge under (every round's W); by default it takes any."""

    @classmethod
    def warning(cls, schedule: NetworkSchedule) -> str | None:
        """The warning rank 0 prints before training, None for none: a scheme exact only under a doubly stochastic
        W converges to a biased point on one-way links that fail (a round's W is then only row-stochastic)."""
        if DOUBLY_STOCHASTIC not in cls.capabilities or not schedule.directed or not schedule.lossy:
            return None
        return (f"--gossip {cls.name} on one-way links with failures (--link-failure, --churn, --crash or "
                "--participation): W is only row-stochastic in the rounds that lose a link or a peer, so it converges "
                "to a biased point, not the optimum")



@method_options("gossip scheme: multi-step")
class MultiStepOptions:
    """The option of the schemes that repeat a gossip step (MULTI_STEP)."""

    gossip_steps: int = opt(1, "gossip steps S per SGD step: the scheme's round, then S − 1 pure gossip steps (g = 0) "
                               "on the same round's network (a time-varying graph gives its round's graph S times; "
                               "link failures are drawn once a round); SGP's published code takes 1. Only the "
                               "schemes marked multi-step (--help gossip)", bounds=">= 1")


class MultiStep(Scheme):
    """The base of a scheme whose round with g = 0 is a pure gossip step (it declares MULTI_STEP too): it takes
    --gossip-steps S, and its round repeats S times (`rounds`)."""

    Options = MultiStepOptions
    capabilities: ClassVar[frozenset[str]] = frozenset({MULTI_STEP})


__all__ = ["COMPRESSIBLE", "DEBIASED", "DOUBLY_STOCHASTIC", "ERROR_FEEDBACK", "GIVES_GRADIENTS", "MIXES_BY_W",
           "MULTI_STEP", "MultiStep", "NO_REJOIN_MIX", "OWNS_MOMENTUM", "PLAIN_MIX", "SCHEMES", "Scheme", "State",
           "UPDATED_ONLY"]
