"""The records of the noise-then-gossip schemes (--gossip muffliato, --gossip decor), key by key: what they add to
the round records, to summary.json and to manifest.json. Present only in runs of those schemes; the shared records
are p2pfl.records, these extend them."""
from __future__ import annotations

from typing import Any

from p2pfl.records import Manifest, RoundRecord, Summary

#: The manifest entry both schemes write at set-up: the mechanism, its noise and what its ledger assumes and gives.
MANIFEST_KEY = "gossip_privacy"


class MuffliatoRound(RoundRecord, total=False):
    """A round of --gossip muffliato: the (ε, δ) of the ordered pairs u ≠ v so far, largest and mean."""

    muffliato_eps_max: float
    muffliato_eps_mean: float


class MuffliatoSummary(Summary, total=False):
    """summary.json of --gossip muffliato: the pairs' ε at the end, local DP's for the same noise, ε by hop distance
    ([d, mean, max]), δ, the ledger's mode (`exact` or `reach`, p2pfl.privacy.muffliato) and the run folder's file
    of the K × K matrix (row u, column v: ε_{u→v})."""

    muffliato_eps_max: float
    muffliato_eps_mean: float
    muffliato_ldp_eps: float
    muffliato_delta: float
    muffliato_eps_by_distance: list[list[float]]
    muffliato_ledger: str
    muffliato_matrix: str


class DecorRound(RoundRecord, total=False):
    """A round of --gossip decor: the peers' SecLDP (ε, δ) so far, largest and mean."""

    decor_eps_max: float
    decor_eps_mean: float


class DecorSummary(Summary, total=False):
    """summary.json of --gossip decor: the peers' ε at the end, local DP's for the local noise alone, δ, and the run
    folder's file of each peer's ε."""

    decor_eps_max: float
    decor_eps_mean: float
    decor_ldp_eps: float
    decor_delta: float
    decor_peer_eps: str


class GossipPrivacyManifest(Manifest, total=False):
    """manifest.json of either scheme: `gossip_privacy`, its mechanism, parameters, guarantee and assumptions."""

    gossip_privacy: dict[str, Any]
