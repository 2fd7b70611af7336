"""The wire: along the links of a round (receiver <- senders, edges of the support graph only), every sending
peer's buffer reaches each of its receivers once.

Co-located peers hand each other their tensors through memory. Peers on other ranks exchange over an MPI
distributed-graph communicator that links exactly the ranks hosting adjacent peers. A message is one contiguous
buffer (a flattened parameter vector or a representation matrix), never pickled; a buffer that a rank sends to
several peers on the same remote rank travels once. Buffers larger than `chunk_bytes` travel in chunks, so
vectors over 2 GiB work. GPU tensors are staged through pinned host memory unless MPI is CUDA-aware.

A call names its links: for each receiving peer, the peers it hears from (by default every graph neighbour).
Links may be one-way (the one-peer exponential graph, a server's two hops) and change every round; every rank
computes the same links, so a rank posts exactly the receives that will be matched and no wait is for a peer
that is not coming. The communicator links the ranks of the support graph (every edge any round may use).

Matching is by order: for each pair of ranks, both sides list the (sending peer) messages in ascending peer
order, and MPI keeps messages with the same source, tag and communicator in order. The tag carries the sending
peer and the message kind, so a missing message shows up as a wait on that very peer, never as a mismatch.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import torch
from mpi4py import MPI

from p2pfl.comm.placement import Placement
from p2pfl.comm.watchdog import Watchdog
from p2pfl.comm.world import POLL_FIRST_S, POLL_MAX_S, World

KINDS = {"params": 1, "reps": 2, "control": 3, "test": 4}
Links = Mapping[int, Sequence[int]]  # receiving peer -> the peers it hears from (a global view, the same on every rank)
TIMEOUT_EXIT = 3  # exit status of a job whose exchange waited past --timeout
_PEER_TAG_SPAN = 4096


@dataclass
class CommStats:
    """Counters of one rank: wire bytes per neighbour rank, logical bytes per peer, seconds spent."""

    wire_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    wire_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    peer_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    peer_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    time_comm_s: float = 0.0
    time_wait_s: float = 0.0

    def snapshot(self) -> dict:
        return {"wire_sent": dict(self.wire_sent), "wire_recv": dict(self.wire_recv),
                "peer_sent": dict(self.peer_sent), "peer_recv": dict(self.peer_recv),
                "time_comm_s": self.time_comm_s, "time_wait_s": self.time_wait_s}


@dataclass
class _Posted:
    """The requests one exchange call has posted, and which of them belong to each remote sending peer."""

    requests: list[MPI.Request] = field(default_factory=list)
    waiting: list[tuple[int, list[int]]] = field(default_factory=list)  # (remote peer, indices of its requests)
    received: dict[int, torch.Tensor] = field(default_factory=dict)  # remote peer -> its receive buffer


def _tag(peer: int, kind: str) -> int:
    return (peer % _PEER_TAG_SPAN) * 8 + KINDS[kind]


def _nbytes(buf: np.ndarray | torch.Tensor) -> int:
    return buf.nbytes if isinstance(buf, np.ndarray) else buf.numel() * buf.element_size()


class Exchange:
    """Neighbour exchange for the peers hosted by this rank."""

    def __init__(self, world: World, graph: nx.Graph, placement: Placement, timeout: float,
                 chunk_bytes: int = 1 << 30, cuda_aware: bool = False,
                 on_timeout: Callable[[str], None] | None = None) -> None:
        self.world = world
        self.placement = placement
        self.timeout = timeout
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.cuda_aware = cuda_aware
        self.local_peers = placement.peers_of(world.rank)
        self.neighbors = {p: tuple(sorted(int(q) for q in graph.neighbors(p))) for p in graph.nodes}
        self.stats = CommStats()
        self.silent: set[int] = set()  # testing aid: peers that send nothing
        self.poisoned: set[int] = set()  # testing aid: peers whose messages are all NaN
        self.seed = 0  # the run's seed, for what attackers draw (p2pfl.byzantine)
        #: False (--on-nonfinite abort): a non-finite message ends the job instead of being rejected.
        self.reject_nonfinite = True
        #: (receiver, sender) of the messages rejected since the runner last took them (`take_rejected`).
        self.rejected: list[tuple[int, int]] = []
        #: (receiver, neighbour) that a robust aggregator clipped or trimmed since the last `take_cut`.
        self.cut: list[tuple[int, int]] = []
        remote = sorted({placement.rank_of(q) for p in self.local_peers for q in self.neighbors[p]} - {world.rank})
        self.remote_ranks = remote
        self.comm = world.neighbour_comm(remote)
        self._recv_buffers: dict[tuple, torch.Tensor] = {}
        self._send_buffers: dict[tuple, torch.Tensor] = {}
        self._watchdog = Watchdog(on_timeout or self._abort_job) if self.comm is not None else None

    def _abort_job(self, message: str) -> None:
        """The watchdog's default: the message is printed already; end every rank with TIMEOUT_EXIT."""
        self.world.abort(TIMEOUT_EXIT)

    def _plan(self, links: Links) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Per remote rank: the local peers whose buffer goes there, and the remote peers whose buffer comes here."""
        me = self.world.rank
        sends: dict[int, set[int]] = defaultdict(set)
        recvs: dict[int, set[int]] = defaultdict(set)
        for receiver, senders in links.items():
            at = self.placement.rank_of(receiver)
            for q in senders:
                src = self.placement.rank_of(q)
                if at == me and src != me:
                    recvs[src].add(q)
                elif src == me and at != me:
                    sends[at].add(q)
        outside = (set(sends) | set(recvs)) - set(self.remote_ranks)
        if outside:
            raise ValueError(f"exchange: links to rank(s) {sorted(outside)} outside the support graph")
        return ({r: sorted(sends.get(r, ())) for r in self.remote_ranks},
                {r: sorted(recvs.get(r, ())) for r in self.remote_ranks})

    def all_links(self, peers: Iterable[int] | None = None) -> dict[int, tuple[int, ...]]:
        """Every support edge both ways among `peers` (default: all peers): the static exchange."""
        keep = set(self.neighbors) if peers is None else set(peers)
        return {p: tuple(q for q in self.neighbors[p] if q in keep) for p in sorted(keep)}

    def _chunks(self, flat: np.ndarray) -> Iterable[np.ndarray]:
        raw = flat.view(np.uint8)
        for start in range(0, raw.size, self.chunk_bytes):
            yield raw[start:start + self.chunk_bytes]

    def _post(self, start: Callable[..., MPI.Request], buf: np.ndarray | torch.Tensor,
              **where: int) -> list[MPI.Request]:
        """Start a send or receive of one buffer: host memory in chunks of at most `chunk_bytes`, a GPU
        buffer (CUDA-aware MPI) whole. `where` is the peer rank and the tag."""
        if isinstance(buf, np.ndarray):
            return [start([chunk, MPI.BYTE], **where) for chunk in self._chunks(buf)]
        return [start(buf, **where)]

    def _host_view(self, peer: int, tensor: torch.Tensor, kind: str) -> np.ndarray | torch.Tensor:
        """A buffer MPI can read for `tensor`: itself on the CPU or with CUDA-aware MPI, else pinned staging."""
        if tensor.device.type == "cpu":
            return tensor.contiguous().view(-1).numpy()
        if self.cuda_aware:
            return tensor.contiguous().view(-1)
        key = (kind, peer, tensor.shape, tensor.dtype)
        buf = self._send_buffers.get(key)
        if buf is None:
            buf = self._send_buffers[key] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        buf.copy_(tensor)
        return buf.view(-1).numpy()

    def _recv_buffer(self, peer: int, shape: torch.Size, dtype: torch.dtype, device: torch.device,
                     kind: str) -> torch.Tensor:
        key = (kind, peer, shape, dtype)
        buf = self._recv_buffers.get(key)
        if buf is None:
            on_gpu = device.type == "cuda"
            if on_gpu and self.cuda_aware:
                buf = torch.empty(shape, dtype=dtype, device=device)
            else:
                buf = torch.empty(shape, dtype=dtype, pin_memory=on_gpu)
            self._recv_buffers[key] = buf
        return buf

    def exchange(self, payloads: dict[int, torch.Tensor], round: int, kind: str = "params",
                 links: Links | None = None) -> dict[int, dict[int, torch.Tensor]]:
        """Send local peers' payloads along `links` (receiver -> senders; default every support edge both ways);
        return, per local receiver of `links`, {sender: tensor} in ascending sender order.

        Every local sender needs a payload; all payloads of one call share shape and dtype, and a rank with
        local receivers holds at least one payload (its shape is what arrives). Received tensors live in
        buffers reused by the next call of the same kind: consume them before then.
        """
        links = self.all_links() if links is None else links
        receivers = [p for p in self.local_peers if p in links]
        if not payloads:
            if receivers and any(links[p] for p in receivers):
                raise ValueError(f"exchange: rank {self.world.rank} receives for {receivers} but holds no payload")
            return {p: {} for p in receivers}
        sample = next(iter(payloads.values()))
        received = self._exchange_remote(payloads, sample, round, kind, links, receivers)
        t0 = MPI.Wtime()
        out = self._inboxes(payloads, received, sample, links, receivers)
        self.stats.time_comm_s += MPI.Wtime() - t0
        return out

    def _exchange_remote(self, payloads: dict[int, torch.Tensor], sample: torch.Tensor, round: int, kind: str,
                         links: Links, receivers: list[int]) -> dict[int, torch.Tensor]:
        """Plan, post receives, post sends, wait: returns the receive buffer of each remote sending peer
        (none in one process, where every neighbour is co-located)."""
        if self.comm is None:
            return {}
        t0 = MPI.Wtime()
        sends, recvs = self._plan(links)
        posted = _Posted()
        self._post_receives(posted, recvs, sample, kind)
        self._post_sends(posted, sends, payloads, kind)
        t1 = MPI.Wtime()
        self._wait(posted, links, receivers, round)
        t2 = MPI.Wtime()
        self.stats.time_comm_s += t1 - t0
        self.stats.time_wait_s += t2 - t1
        return posted.received

    def _post_receives(self, posted: _Posted, recvs: dict[int, list[int]], sample: torch.Tensor, kind: str) -> None:
        """One receive per remote sending peer, into a buffer shaped like `sample` and reused across calls."""
        for rank in self.remote_ranks:
            for q in recvs[rank]:
                buf = self._recv_buffer(q, sample.shape, sample.dtype, sample.device, kind)
                target = buf.view(-1) if buf.device.type == "cuda" else buf.view(-1).numpy()
                first = len(posted.requests)
                posted.requests += self._post(self.comm.Irecv, target, source=rank, tag=_tag(q, kind))
                posted.waiting.append((q, list(range(first, len(posted.requests)))))
                posted.received[q] = buf
                self.stats.wire_recv[rank] += _nbytes(target)

    def _post_sends(self, posted: _Posted, sends: dict[int, list[int]], payloads: dict[int, torch.Tensor],
                    kind: str) -> None:
        """One send per (local peer, remote rank hosting a neighbour of it); silent peers send nothing."""
        for rank in self.remote_ranks:
            for p in sends[rank]:
                if p in self.silent:
                    continue
                view = self._host_view(p, self._outgoing(p, payloads[p]), kind)
                posted.requests += self._post(self.comm.Isend, view, dest=rank, tag=_tag(p, kind))
                self.stats.wire_sent[rank] += _nbytes(view)

    def reject(self, round: int, pairs: list[tuple[int, int]], agree: bool = False) -> set[tuple[int, int]]:
        """Record (receiver, sender) messages found non-finite and return the set to treat as failed links:
        this rank's, or with `agree` (collective) every rank's. With reject_nonfinite off, raise naming them."""
        found = sorted(set(pairs))
        if agree:
            found = sorted({tuple(pair) for part in self.world.allgather(found) for pair in part})
        if found and not self.reject_nonfinite:
            receiver, sender = found[0]
            raise RuntimeError(f"non-finite message from peer {sender} to peer {receiver} in round {round} "
                               "(--on-nonfinite abort)")
        self.rejected += [pair for pair in found if self.placement.rank_of(pair[0]) == self.world.rank]
        return set(found)

    def take_rejected(self) -> list[tuple[int, int]]:
        """The messages rejected since the last call, sorted; clears them."""
        out, self.rejected = sorted(set(self.rejected)), []
        return out

    def take_cut(self) -> list[tuple[int, int]]:
        """What robust aggregation cut since the last call, sorted; clears it."""
        out, self.cut = sorted(set(self.cut)), []
        return out

    def _outgoing(self, peer: int, payload: torch.Tensor) -> torch.Tensor:
        """What `peer` puts on the wire: its payload, or NaN of its shape when poisoned (--fault nan@P:R)."""
        return torch.full_like(payload, float("nan")) if peer in self.poisoned else payload

    def _inboxes(self, payloads: dict[int, torch.Tensor], received: dict[int, torch.Tensor], sample: torch.Tensor,
                 links: Links, receivers: list[int]) -> dict[int, dict[int, torch.Tensor]]:
        """Per local receiver, its senders' tensors: a co-located sender's payload itself, a remote one's receive
        buffer (on the payloads' device). Counts the logical bytes of every link at both of its ends."""
        nbytes = sample.numel() * sample.element_size()
        out: dict[int, dict[int, torch.Tensor]] = {}
        for p in receivers:
            inbox = {}
            for q in sorted(links[p]):
                if q in payloads:
                    inbox[q] = self._outgoing(q, payloads[q])
                else:
                    buf = received[q]
                    inbox[q] = buf.to(sample.device, non_blocking=True) if buf.device != sample.device else buf
                self.stats.peer_recv[p] += nbytes
            out[p] = inbox
        for senders in links.values():
            for q in senders:
                if q in payloads and q not in self.silent:
                    self.stats.peer_sent[q] += nbytes
        return out

    def _wait(self, posted: _Posted, links: Links, receivers: list[int], round: int) -> None:
        """Wait for every request; past the timeout the watchdog names a missing neighbour and the round."""
        requests, waiting = posted.requests, posted.waiting
        if not requests:
            return
        done = np.zeros(len(requests), dtype=bool)

        def describe() -> str:
            missing = [q for q, idx in waiting if not done[idx].all()]
            if not missing:
                return (f"p2pfl: timeout: rank {self.world.rank} waited {self.timeout:g} s in round {round} "
                        f"for its sends to complete")
            q = missing[0]
            waiter = next(p for p in receivers if q in links[p])
            return (f"p2pfl: timeout: peer {waiter} (rank {self.world.rank}) waited {self.timeout:g} s in round "
                    f"{round} for neighbour {q} (rank {self.placement.rank_of(q)})"
                    + (f"; also missing: {missing[1:]}" if len(missing) > 1 else ""))

        assert self._watchdog is not None
        self._watchdog.arm(self.timeout, describe)
        try:
            remaining, pause = len(requests), POLL_FIRST_S
            while remaining:
                if self.world.oversubscribed:  # sleep between polls rather than spin (p2pfl.comm.world.poll_until)
                    indices = MPI.Request.Testsome(requests)
                    if indices is not None and not indices:
                        time.sleep(pause)
                        pause = min(2 * pause, POLL_MAX_S)
                        continue
                    pause = POLL_FIRST_S
                else:
                    indices = MPI.Request.Waitsome(requests)
                if indices is None:
                    break
                done[list(indices)] = True
                remaining = int((~done).sum())
        finally:
            self._watchdog.disarm()
