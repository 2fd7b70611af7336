"""--fault, the testing aid: from a given round on a rank raises, or a peer falls silent, sends NaN or has its local
update diverge (that round only); the runner applies it at the start of every round (docs/robustness.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from p2pfl.config import parse_fault

if TYPE_CHECKING:
    from p2pfl.gossip.checked import Faults


@dataclass(frozen=True)
class InjectedFault:
    """One --fault KIND@WHO:ROUND: `who` is a rank for raise, a peer for silent, nan and diverge."""

    kind: str
    who: int
    round: int

    @classmethod
    def of(cls, spec: str | None) -> InjectedFault | None:
        """The fault a validated --fault value names (None when unset)."""
        return None if spec is None else cls(*parse_fault(spec))

    def apply(self, round: int, rank: int, local_peers: list[int], faults: Faults) -> None:
        """Inject the fault into `round` on this rank (hosting `local_peers`) through the checked exchange's
        `faults`; raises RuntimeError on the rank that is to fail."""
        if round < self.round:
            return
        if self.kind == "raise" and self.who == rank:
            raise RuntimeError(f"injected fault on rank {self.who} in round {round} (--fault)")
        if self.kind == "silent" and self.who in local_peers:
            faults.silent.add(self.who)
        if self.kind == "nan" and self.who in local_peers:
            faults.poisoned.add(self.who)
        if self.kind == "diverge":  # that round only
            faults.diverging.discard(self.who)
            if round == self.round and self.who in local_peers:
                faults.diverging.add(self.who)
