"""The run context: what a method and the runner see of a run (configuration, graph, schedule, this rank's peers,
the message pipeline, the run folder), built once by p2pfl.run.build_context."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import torch

from p2pfl.byzantine import Robust
from p2pfl.comm.placement import Placement
from p2pfl.comm.transport import Transport
from p2pfl.comm.world import World
from p2pfl.config import RunConfig
from p2pfl.gossip import CheckedExchange, Gossip
from p2pfl.gossip.schemes import Scheme
from p2pfl.network import NetworkSchedule
from p2pfl.network.timing import NetworkModel
from p2pfl.runtime.runfolder import RunFolder


@dataclass
class RunContext:
    """What an algorithm sees of the run: the configuration, the graph (the support of every round's links),
    the schedule of round networks (their weights included), this rank's peers, and the message pipeline:
    `checked` (encode, exchange, validate, agree) and `gossip` (mixes over it) on top of the `transport`."""

    cfg: RunConfig
    world: World
    graph: nx.Graph
    schedule: NetworkSchedule
    placement: Placement
    transport: Transport
    checked: CheckedExchange
    gossip: Gossip
    device: torch.device
    run_dir: Path
    folder: RunFolder | None = None
    spec: Any = None  # the --peers-spec file as p2pfl.config.resolve had its owner read it, once a run
    robust: Robust = field(default_factory=lambda: Robust(frozenset()))  # attackers and the aggregator
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    scheme: Scheme | None = None  # the run's --gossip scheme, built and prepared by p2pfl.run.build_context
    clock: NetworkModel | None = None  # the simulated clock's network model (SPEC §9), None when off
    curious: Any = None  # the curious peers' attack (p2pfl.curious.observer), None without --curious

    @property
    def n_peers(self) -> int:
        return self.placement.n_peers

    @property
    def local_peers(self) -> list[int]:
        return self.placement.peers_of(self.world.rank)

    def record_manifest(self, **entries: Any) -> None:
        """Add entries to manifest.json (the same values on every rank; rank 0 writes them)."""
        self.manifest_extra.update(entries)
        if self.folder is not None:
            self.folder.update_manifest(**entries)
