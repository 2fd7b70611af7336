"""A round's record from every rank's share: what this rank counted in the round (`RoundMeter`), and on rank 0 the
round record of the gathered shares, the simulated clock's inputs and the warning on non-finite values."""
from __future__ import annotations

from typing import Any

from p2pfl.comm.transport import CommStats
from p2pfl.gossip import Events
from p2pfl.method import LocalRound
from p2pfl.network import RoundNetwork
from p2pfl.records import NetworkRecord, RoundRecord, round_record

#: Round records carry ‖W_t − J‖₂ (an SVD of W_t) up to this many peers.
SPECTRAL_MAX_PEERS = 256

Pair = tuple[int, int]


def merge(parts: list[dict]) -> dict:
    """The ranks' per-peer dicts as one, by peer."""
    out: dict = {}
    for part in parts:
        out.update(part)
    return {k: out[k] for k in sorted(out)}


class RoundMeter:
    """This rank's counters at a round's start (bytes per peer, and per link when the simulated clock reads them;
    seconds exchanging and waiting), then its share of the round record."""

    def __init__(self, stats: CommStats, clock: bool) -> None:
        self.stats = stats
        self.sent0, self.recv0 = dict(stats.peer_sent), dict(stats.peer_recv)
        self.links0 = dict(stats.link_sent) if clock else None
        self.comm0, self.wait0 = stats.time_comm_s, stats.time_wait_s

    def share(self, local: LocalRound, events: Events, peers: list[int], busy_s: float, local_s: float,
              steps: dict[int, float] | None = None) -> dict[str, Any]:
        """What this rank sends rank 0 of the round: the local peers' metrics and bytes, the seconds of its phases
        (`busy_s` of them in all, `local_s` in the local update), what its exchanges rejected and cut, the peers
        it rolled back; with the clock the local steps and the bytes per link."""
        stats = self.stats
        comm = stats.time_comm_s - self.comm0
        wait = stats.time_wait_s - self.wait0
        part: dict[str, Any] = {
            "per_peer": local.metrics,
            "sent": {p: stats.peer_sent.get(p, 0) - self.sent0.get(p, 0) for p in peers},
            "recv": {p: stats.peer_recv.get(p, 0) - self.recv0.get(p, 0) for p in peers},
            "compute_s": busy_s - comm - wait, "comm_s": comm, "wait_s": wait, "local_s": local_s,
            "rejected": list(events.rejected), "rolled_back": sorted(local.rolled_back),
            "cut": list(events.cut), "trim_lowered": list(events.lowered),
        }
        if self.links0 is not None:
            links0 = self.links0
            part["steps"] = steps or {}
            part["links"] = {link: n - links0.get(link, 0) for link, n in stats.link_sent.items()
                             if n != links0.get(link, 0)}
        return part


def rejected_links(parts: list[dict[str, Any]]) -> list[Pair]:
    """The links (receiver, sender) some message of which was rejected, over every rank's share."""
    return sorted(pair for p in parts for pair in p["rejected"])


def assemble(t: int, parts: list[dict[str, Any]], net: RoundNetwork, *, elapsed_s: float,
             consensus_distance: float | None, network: NetworkRecord, round_s: float, schedule_s: float,
             rejected: list[Pair], robust: bool, extra: dict[str, float] | None) -> RoundRecord:
    """Round t's record from every rank's share (`RoundMeter.share`), its network's record and the method's
    network-level numbers; the slowest rank's seconds; `trim_lowered` only for robust runs."""
    return round_record(
        t, elapsed_s, net.active, merge([p["per_peer"] for p in parts]), consensus_distance,
        merge([p["sent"] for p in parts]), merge([p["recv"] for p in parts]),
        time_compute_s=max(p["compute_s"] for p in parts), time_comm_s=max(p["comm_s"] for p in parts),
        time_wait_s=max(p["wait_s"] for p in parts), time_local_s=max(p["local_s"] for p in parts),
        round_s=round_s, network=network, time_schedule_s=schedule_s,
        rejected=rejected,
        rolled_back=sorted(q for p in parts for q in p["rolled_back"]),
        cut=sorted(pair for p in parts for pair in p["cut"]),
        trim_lowered=sorted(pair for p in parts for pair in p["trim_lowered"]) if robust else None,
        extra=extra)


def clock_inputs(parts: list[dict[str, Any]]) -> tuple[dict[int, float], dict[Pair, int]]:
    """(local steps per peer, bytes per link) of a round, what the simulated clock times (SPEC §9); a link may carry
    several messages a round: one transfer."""
    steps = merge([p["steps"] for p in parts])
    sizes: dict[Pair, int] = {}
    for p in parts:
        for link, n in p["links"].items():
            sizes[link] = sizes.get(link, 0) + n
    return steps, sizes


def nonfinite_warning(t: int, record: dict[str, Any]) -> str | None:
    """The one line of round t when messages were rejected or peers rolled back (None when neither)."""
    parts = []
    if record["rejected"]:
        parts.append("rejected non-finite messages (receiver <- sender) "
                     + ", ".join(f"{r} <- {s}" for r, s in record["rejected"]))
    if record["rolled_back"]:
        parts.append(f"rolled back peers {record['rolled_back']} whose update turned non-finite")
    return f"round {t}: " + "; ".join(parts) if parts else None
