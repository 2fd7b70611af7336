"""Each distinct model scored once: the final evaluation finds the peers whose models are bitwise identical (after
a server round or an exact all-reduce every peer holds the network average) from a digest of each model's state,
scores one model of each group, and reports its scores for every peer holding it; a group whose model is bitwise a
model already scored (the network average, on the root that scores it) takes that model's scores.

Exact, not approximate: two models share scores only when every parameter and buffer has the same bytes, so a
score reported for a peer is what scoring its own model gives. Each rank plans for its own peers (the lowest peer
of a group scores it), so no rank waits for another's scoring: a model held on several ranks is scored once on
each, in parallel, and the scores reported are the same for any placement of the peers on ranks.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from p2pfl.records import ScoringRecord


def state_digest(model: nn.Module) -> bytes:
    """A digest of everything a scoring pass reads of `model`: the name, dtype, shape and bytes of each parameter
    and buffer, in the module's order. Equal digests mean identical models (up to a BLAKE2b collision)."""
    h = hashlib.blake2b(digest_size=32)
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        t = tensor.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.digest()


@dataclass(frozen=True)
class ScoringPlan:
    """Who scores what: `source[p]` is the peer whose scores peer p reports (p itself when it is scored),
    `known[p]` the index of the already scored model p holds (then p is in no `source`)."""

    source: dict[int, int]
    known: dict[int, int]

    @property
    def scorers(self) -> list[int]:
        """The peers whose models are scored, one per distinct model not scored already, ascending."""
        return sorted(p for p, q in self.source.items() if p == q)


def plan_scoring(digests: Mapping[int, bytes], known: Sequence[bytes] = ()) -> ScoringPlan:
    """The plan for the peers of `digests` (a rank's scored peers), given the digests of the models whose scores
    the rank already has (`known`, in order, the root's network averages; a digest found twice takes its first)."""
    first_known: dict[bytes, int] = {}
    for i, d in enumerate(known):
        first_known.setdefault(d, i)
    lowest: dict[bytes, int] = {}
    source: dict[int, int] = {}
    held: dict[int, int] = {}
    for p in sorted(digests):
        d = digests[p]
        if d in first_known:
            held[p] = first_known[d]
        else:
            source[p] = lowest.setdefault(d, p)
    return ScoringPlan(source, held)


def scoring_record(parts: Sequence[tuple[int, Sequence[bytes]]], known: Sequence[bytes],
                   by_digest: bool = True) -> ScoringRecord:
    """What the evaluation scored, from each rank's (models it scored, digests of its scored peers' models) and
    the digests of the `known` models the root scored first (the network averages, counted among the models).
    Without digests (`by_digest` False) every scored peer's model counts as distinct."""
    digests = [d for _, part in parts for d in part]
    held = set(known)
    return ScoringRecord(models_scored=len(known) + sum(n for n, _ in parts), peers_scored=len(digests),
                         peer_models_distinct=len(set(digests)) if by_digest else len(digests),
                         peers_holding_average=sum(d in held for d in digests) if by_digest else 0,
                         by_digest=by_digest)
