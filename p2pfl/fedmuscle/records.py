"""FedMuscle's own records, key by key: the per-peer task metric of its eval records, what it adds to summary.json
and to manifest.json (runs of fedmuscle, and of local with --peers-spec). The shared records are in
p2pfl.records; these extend them.
"""
from __future__ import annotations

from typing import TypedDict

from p2pfl.records import DataPartition, Manifest, Partition, Summary

#: FedMuscle's per-peer eval metrics: each peer's task metric and its name (compared by the Δ% of SPEC §6).
TASK_METRIC, TASK_METRIC_NAME = "task_metric", "task_metric_name"


# ------------------------------------------------------------------------------------------------ summary.json

class MuscleCommunication(TypedDict):
    """FedMuscle's bytes per peer and round, measured and by formula, next to the paper's server design."""

    bytes_sent_per_peer_round: float
    bytes_sent_per_peer_round_by_peer: dict[str, float]
    p2p_formula: str
    p2p_bytes_per_peer_round_expected: float
    server_formula: str
    server_M: int
    server_uplink_bytes_per_peer_round: float
    server_downlink_bytes_per_peer_round: float
    server_bytes_per_round: float


class MuscleSummary(Summary, total=False):
    """summary.json of a FedMuscle run: the shared summary and its communication."""

    communication: MuscleCommunication  # fedmuscle, local --peers-spec


# ------------------------------------------------------------------------------------------------ manifest.json

class TaskGroupPartition(Partition):
    """FedMuscle's partition, within each task group of the peer specification."""

    within: str
    task_groups: list[int]


class PeerSpecEntry(TypedDict):
    """One peer of a --peers-spec (PeerSpec.manifest)."""

    peer: int
    model: str
    task: str
    dataset: str
    group: int
    task_group: int
    labels: list[int] | None
    metric: str


class ModelEntry(TypedDict):
    """One model family of a --peers-spec run."""

    group: int
    model: str
    task: str
    dataset: str
    parameters: int
    trainable: int
    representation_trainable: int
    outputs: int
    input: list[int]


class PublicData(TypedDict):
    dataset: str
    size: int
    batch: int
    rep_dim: int
    source: str
    conversion: str


class Alignment(TypedDict):
    loss: str
    muscle_m: int
    contrastive_steps: int
    tau: float
    tau_prev: float
    gram_tau: float
    gram_label_smoothing: float
    matched: bool  # --align-tau given: every loss at that one temperature


class MuscleManifest(Manifest, total=False):
    """manifest.json with FedMuscle's entries: the shared manifest, the peers' assignments, model families, public
    set and alignment; a FedMuscle run's partition is a TaskGroupPartition, the other methods' a DataPartition."""

    partition: DataPartition | TaskGroupPartition  # type: ignore[misc]  # widens the shared manifest's
    peers_spec: list[PeerSpecEntry]  # fedmuscle, local --peers-spec
    models: list[ModelEntry]  # fedmuscle, local --peers-spec
    public: PublicData  # fedmuscle, local --peers-spec
    alignment: Alignment  # fedmuscle, local --peers-spec
