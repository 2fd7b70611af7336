"""The method interface: what a method supplies to the runner (`Algorithm`), and what a round's phases hand back
(`LocalRound`, `Phase`). The runner (p2pfl.runner) drives the rounds; the context (p2pfl.context) is what a
method sees of the run."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from p2pfl.capabilities import ASYNCHRONOUS, BATCHABLE, FEATURES, HANDS_OVER, PER_SAMPLE, SEQUENCE_LABELS, TOKENS
from p2pfl.config import RunConfig
from p2pfl.context import RunContext
from p2pfl.gossip import Events
from p2pfl.network import RoundNetwork
from p2pfl.records import Summary
from p2pfl.seeding import SHARED, torch_generator

__all__ = ["ASYNCHRONOUS", "BATCHABLE", "Algorithm", "LocalRound", "Phase"]


@dataclass
class LocalRound:
    """What the local part of a round did on this rank: each trained peer's metrics (e.g. {"loss": ...}) and the
    peers whose update turned non-finite and were rolled back to their state before the round."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    rolled_back: list[int] = field(default_factory=list)


@dataclass
class Phase:
    """What a round's exchange phase (`rejoin`, `communicate`) hands the runner: per-peer metrics, which join
    the local update's in the round record, and what its exchanges rejected and cut."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    events: Events = field(default_factory=Events)


class Algorithm:
    """A method: what a peer does locally, what it sends, how it combines, how it is evaluated.

    Every round the runner calls `handover`, `rejoin`, `local_updates` of the active peers and `communicate`, each
    given the round's network (p2pfl.network.RoundNetwork: links, weights, active, alive and straggling peers), and
    `evaluate` with the network of the round evaluated. The method keeps no network of its own: what a call
    uses is what it is given.
    """

    name = "base"
    headline = "loss"
    #: Its paper's values of options the user leaves unset (flags, YAML keys, make_config arguments).
    defaults: ClassVar[dict[str, Any]] = {}
    #: Options it restricts: option -> the only values it accepts (anything else is a ConfigError).
    allowed: ClassVar[dict[str, tuple[Any, ...]]] = {}
    #: What the method can do that the run asks about instead of its name (p2pfl.capabilities: ASYNCHRONOUS,
    #: BATCHABLE), each declared once by the class that gives it and inherited; read it as `can(capability)`.
    capabilities: ClassVar[frozenset[str]] = frozenset()
    #: The capabilities it lacks, each with why (the one line an error or the manifest gives): a method that
    #: cannot do what its base class can says so here, which takes the capability away.
    lacks: ClassVar[dict[str, str]] = {
        ASYNCHRONOUS: "it declares no vector a pair averages: async_vector",
        HANDS_OVER: "it declares no vector that carries its model: carried",
        BATCHABLE: "its local loss takes one peer at a time",
        FEATURES: "it declares no training on feature vectors",
        TOKENS: "it declares no next-token prediction",
        SEQUENCE_LABELS: "it declares no classification of token sequences",
        PER_SAMPLE: "it declares no loss that is a mean of per-sample terms, so a sample's gradient is not its own",
    }

    #: Core options it never reads, each with why (p2pfl.ignored warns when one is given); inherited, a class's
    #: own entries added to its bases' and its `borrows` taking theirs away. An ignored registry option
    #: (`partition`) takes its components' options (`alpha`) with it.
    ignores: ClassVar[dict[str, str]] = {}
    #: Options of another method's own section that it reads too (fedprox reads moon's `mu`); inherited.
    borrows: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class's own `capabilities` add to its bases', its own `lacks` take theirs away; `ignores` and
        `borrows` add to the bases' (a borrowed option is not ignored)."""
        super().__init_subclass__(**kwargs)
        cls.borrows = frozenset().union(*(getattr(b, "borrows", frozenset()) for b in cls.__bases__),
                                        cls.__dict__.get("borrows", frozenset()))
        ignored = {k: v for b in reversed(cls.__bases__) for k, v in getattr(b, "ignores", {}).items()}
        cls.ignores = {k: v for k, v in {**ignored, **cls.__dict__.get("ignores", {})}.items()
                       if k not in cls.borrows}
        own, missing = cls.__dict__.get("capabilities", frozenset()), cls.__dict__.get("lacks", {})
        bases = cls.__bases__
        inherited = frozenset().union(*(getattr(b, "capabilities", frozenset()) for b in bases))
        lacked = {k: v for b in reversed(bases) for k, v in getattr(b, "lacks", {}).items()}
        cls.capabilities = (inherited | own) - missing.keys()
        cls.lacks = {k: v for k, v in {**lacked, **missing}.items() if k not in cls.capabilities}

    @classmethod
    def can(cls, capability: str) -> bool:
        """Whether the method has `capability`."""
        return capability in cls.capabilities

    @classmethod
    def why_not(cls, capability: str) -> str:
        """Why the method lacks `capability` (one line)."""
        return cls.lacks.get(capability, f"it does not declare {capability!r}")

    @classmethod
    def runs(cls, cfg: RunConfig) -> type[Algorithm]:
        """The class that runs `cfg` under this method's name (p2pfl.algorithms.get asks; that class's defaults
        and restrictions apply): this one, unless an option hands the run to another."""
        return cls

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        #: One record per local peer (a dataclass the method declares); checkpoints save them field by field.
        self.peers: dict[int, Any] = {}

    def evaluated(self, net: RoundNetwork) -> frozenset[int]:
        """The peers whose metrics count in `net`'s round: alive (not crashed) and honest (not --byzantine)."""
        return net.alive - self.ctx.robust.byzantine

    def eval_sample(self, net: RoundNetwork) -> frozenset[int]:
        """The peers scored one by one at the final evaluation: every evaluated peer, or with --eval-peers N a
        sample of N of them drawn from the stream (seed, SHARED, 'eval-peers'), the same on every rank."""
        alive = sorted(self.evaluated(net))
        n = self.cfg.eval_peers
        if n is None or n >= len(alive):
            return frozenset(alive)
        gen = torch_generator(self.cfg.seed, SHARED, "eval-peers")
        return frozenset(alive[i] for i in torch.randperm(len(alive), generator=gen)[:n].tolist())

    def alive_peers(self, net: RoundNetwork) -> list[int]:
        """The local peers whose metrics count (alive and honest) in `net`'s round, ascending."""
        counted = self.evaluated(net)
        return [p for p in sorted(self.peers) if p in counted]

    def setup(self) -> None:
        """Build the local peers' state (data, models). Bad input raises ValueError (reported once)."""

    def local_updates(self, peers: list[int], round: int, net: RoundNetwork) -> LocalRound:
        """The local work of the given local peers in `round` over its network `net` (none by default)."""
        return LocalRound({p: {} for p in peers})

    def local_steps(self, peer: int, net: RoundNetwork) -> float:
        """The local steps `peer` takes in the round of `net`, what the simulated clock charges its step time for
        (SPEC §9); one by default (a method's one local computation a round)."""
        return 1.0

    def rejoin(self, round: int, net: RoundNetwork) -> Phase | None:
        """Before local training: bring the peers back from sitting out (`net.rejoining`) up to date."""
        return None

    def handover(self, round: int, net: RoundNetwork) -> Phase | None:
        """Before local training, first of all: each receiver of `net.handover` takes the model its sender holds
        (teleport), moved as one message through the round's exchange (`Gossip.handover`). A method with
        HANDS_OVER gets this from `carried` and `carry`."""
        if not net.handover:
            return None
        senders = set(net.handover.values())
        moved = self.ctx.gossip.handover({p: self.carried(p) for p in sorted(self.peers) if p in senders}, net, round)
        for p, vector in moved.vectors.items():
            self.carry(p, vector)
        return Phase(events=moved.events)

    def carried(self, peer: int) -> torch.Tensor:
        """The vector local `peer`'s model is, as a hand-over moves it (a method with HANDS_OVER)."""
        raise NotImplementedError

    def carry(self, peer: int, vector: torch.Tensor) -> None:
        """Make `vector` (another peer's `carried`) local `peer`'s model (a method with HANDS_OVER)."""
        raise NotImplementedError

    def communicate(self, round: int, net: RoundNetwork) -> Phase | None:
        """Exchange with neighbours along `net`'s links (through `ctx.checked` or `ctx.gossip`) and combine;
        returns the phase's per-peer metrics and events."""
        return None

    def async_vector(self, peer: int) -> torch.Tensor:
        """A copy of the vector local `peer` averages under --mode async (a method with ASYNCHRONOUS)."""
        raise NotImplementedError

    def load_async_vector(self, peer: int, vector: torch.Tensor) -> None:
        """Set local `peer`'s averaged vector (under --mode async)."""
        raise NotImplementedError

    def attack_memory(self, peer: int, stream: str = "params") -> dict:
        """What attacker `peer` remembers across rounds of the vectors it sends on `stream` (its record's
        `attack_memory`, checkpointed with it)."""
        return self.peers[peer].attack_memory.setdefault(stream, {})

    def consensus_vectors(self) -> dict[int, torch.Tensor] | None:
        """The local peers' mixed vectors for the consensus distance (None: not applicable); the runner keeps
        those of alive peers."""
        return None

    def mixed_vector(self) -> tuple[int, torch.dtype] | None:
        """The length and dtype of the vector a peer's gossip message carries (what --compress encodes), once set
        up; None when the method mixes none. By default that of its first consensus vector."""
        vectors = self.consensus_vectors()
        if not vectors:
            return None
        first = vectors[min(vectors)]
        return first.numel(), first.dtype

    def mixed_layout(self) -> list[int] | None:
        """The sizes of the segments of the mixed vector (its tensors, in order: what --compress-scope tensor
        compresses one by one), summing to its length; None when it mixes none. By default one segment."""
        mixed = self.mixed_vector()
        return None if mixed is None else [mixed[0]]

    def round_metrics(self, round: int, net: RoundNetwork) -> dict[str, float] | None:
        """Network-level numbers for every round record, round 0's (the start) included (collective; rank 0's
        value is recorded; None: none, the default)."""
        return None

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        """Collective evaluation after `round`, whose network is `net`: (network-level metrics, valid on rank 0;
        per-peer metrics of the local peers still alive)."""
        return {}, {}

    def summary(self) -> dict[str, Any]:
        """Extra entries for summary.json (collective; rank 0's value is written)."""
        return {}

    def augmentation(self) -> str | None:
        """What the local steps do to the training samples, in the few words the start banner and summary.json's
        `run_setup` show ("crop+flip", "none"); None where the method does not say (after `setup`)."""
        return None

    def summary_lines(self, summary: Summary) -> list[str]:
        """The method's own lines of the closing summary printed by rank 0 (e.g. from its summary() entries)."""
        return []
