"""The wire: along the links of a call (receiver <- senders, edges of the support graph only), every sending
peer's payload reaches each of its receivers once. It only transports: what a payload holds, whether it is
sound and how it is combined are the gossip pipeline's (p2pfl.gossip).

Co-located peers hand each other their tensors through memory. Peers on other ranks exchange over an MPI
distributed-graph communicator that links exactly the ranks hosting adjacent peers. A payload is any contiguous
tensor, its size, dtype and shape free per sender and per call: a call sends each remote rank one message of
headers (bytes, dtype, shape of every sending peer's payload), never pickled, so the receiver learns what comes
and allocates it fresh (no buffer is shared between calls); then the payloads of at most `pack_bytes` in one
packed message (thousands of small peers cost two messages per pair of ranks, not two per peer), and each larger
one in a message of its own (no copy). A payload that a rank sends to several peers on the same remote rank
travels once. Data larger than `chunk_bytes` travels in chunks, so payloads over 2 GiB work. GPU tensors are
staged through pinned host memory unless MPI is CUDA-aware.

A call names its links: for each receiving peer, the peers it hears from (by default every graph neighbour).
Links may be one-way (the one-peer exponential graph, a server's two hops) and change every call; every rank
computes the same links and makes the same calls in the same order, so a rank posts exactly the receives that
will be matched and no wait is for a peer that is not coming.

Tags come from the call's sequence number (counted alike on every rank), and the sending peer of a large payload
(or the header or data pack): two calls in flight never match each other's messages, any number of calls a round
works. Within one call and pair of ranks, payloads are listed in ascending sending-peer order on both sides. A
withheld sender (fault injection) is marked so in its header: its receivers wait for a message that never comes,
so a missing peer shows up as a wait on that very peer.

`start` posts a call and returns at once (`Pending`); compute, then `wait` for the inboxes, and `release` them
once read so that their memory serves a later call. `exchange` is start-then-wait (never released: its
receive buffers are the caller's).
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import torch
from mpi4py import MPI

from p2pfl.comm.inbox import LinkArrays, Links, SenderInbox
from p2pfl.comm.placement import Placement
from p2pfl.comm.watchdog import Expiry
from p2pfl.comm.world import POLL_FIRST_S, POLL_MAX_S, World

Inbox = Mapping[int, dict[int, torch.Tensor]]  # local receiver -> {sender: payload}, senders ascending
_MAX_DIMS = 8
_HEADER = 3 + _MAX_DIMS  # nbytes, dtype code, ndim, shape
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)
_CODE = {d: i for i, d in enumerate(_DTYPES)}
#: Payloads of at most this many bytes travel in one packed message per pair of ranks and call (more: their own).
PACK_BYTES = 1 << 16
_HEADS, _PACK, _NEVER = 0, 1, 2  # the peer slots of part 0's tags: header pack, data pack, never-matched receive


def _padded(size: int) -> int:
    """`size` rounded up to 16 bytes (the widest element, complex128): where the next packed payload starts, so
    every payload's view of the pack is aligned for its dtype."""
    return (size + 15) // 16 * 16


@dataclass
class CommStats:
    """Counters of one rank: wire bytes per neighbour rank (the payloads' data, and apart the headers announcing
    each message), logical bytes per peer (the payloads of its links, as sent), seconds spent."""

    wire_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    wire_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    header_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    header_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    peer_sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    peer_recv: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    #: logical bytes per (sender, receiver) link of a local sender: what the simulated clock times (SPEC §9)
    link_sent: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    track_links: bool = True  # whether link_sent is kept (the runner turns it off when no clock reads it)
    time_comm_s: float = 0.0
    time_wait_s: float = 0.0

    def snapshot(self) -> dict:
        return {"wire_sent": dict(self.wire_sent), "wire_recv": dict(self.wire_recv),
                "header_sent": dict(self.header_sent), "header_recv": dict(self.header_recv),
                "peer_sent": dict(self.peer_sent), "peer_recv": dict(self.peer_recv),
                "time_comm_s": self.time_comm_s, "time_wait_s": self.time_wait_s}


def nbytes(t: torch.Tensor) -> int:
    """The bytes of a payload's data."""
    return t.numel() * t.element_size()


def _host_array(t: torch.Tensor) -> np.ndarray:
    """The bytes of a contiguous CPU tensor as a uint8 array (any dtype, bfloat16 and bool included)."""
    return t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, dtype=np.uint8)


def _header(t: torch.Tensor) -> np.ndarray:
    if t.dim() > _MAX_DIMS or t.dtype not in _CODE:
        raise ValueError(f"transport: payloads of at most {_MAX_DIMS} dimensions and a dtype of {_DTYPES}, got "
                         f"{tuple(t.shape)} {t.dtype}")
    head = np.zeros(_HEADER, dtype=np.int64)
    head[:3] = (nbytes(t), _CODE[t.dtype], t.dim())
    head[3:3 + t.dim()] = t.shape
    return head


class _Buffers:
    """Byte buffers by size, lent to a call and given back when nothing reads them any more: pinned staging for
    GPU payloads (given back when the call ends) and received data on the CPU (given back by `Pending.release`,
    never before, so no later call writes into an inbox still in use). A fresh 45 MB buffer costs more in page
    faults than its transfer."""

    def __init__(self, pinned: bool) -> None:
        self.pinned = pinned
        self._free: dict[int, list[torch.Tensor]] = defaultdict(list)

    def take(self, size: int, rounded: bool = False) -> torch.Tensor:
        """A buffer of `size` bytes; `rounded` (packs, whose size changes from call to call): of the next power of
        two, so that a few buffers serve every size instead of one buffer a size kept forever."""
        if rounded:
            size = 1 << max(6, (size - 1).bit_length())
        pool = self._free[size]
        return pool.pop() if pool else torch.empty(size, dtype=torch.uint8, pin_memory=self.pinned)

    def give(self, buffers: Iterable[torch.Tensor]) -> None:
        for b in buffers:
            self._free[b.numel()].append(b)


class Pending:
    """One started call: `wait()` returns its inboxes (once)."""

    def __init__(self, transport: Transport, seq: int, round: int, payloads: Mapping[int, torch.Tensor],
                 links: Links, receivers: list[int], recvs: dict[int, list[int]], withheld: Collection[int]) -> None:
        self._t = transport
        self.seq, self.round, self._withheld = seq, round, withheld
        #: When the call started (its waits' deadline counts from here; Transport._wait).
        self.started = time.monotonic()
        sample = next(iter(payloads.values()), None)
        self.device = sample.device if sample is not None else torch.device("cpu")  # where the inboxes land
        self._payloads, self._links, self._receivers, self._recvs = payloads, links, receivers, recvs
        #: Requests in two phases: the headers' receives, then the sends and the data's receives. Waiting for
        #: the headers alone first matters: a large send completes only once its receiver posted the data's
        #: receive, which it does after its own headers are in.
        self._heads: tuple[list[MPI.Request], list[int]] = ([], [])
        self._rest: tuple[list[MPI.Request], list[int]] = ([], [])  # owner -1: one of our sends
        self._headers: dict[int, np.ndarray] = {}
        self._packs_in: dict[int, np.ndarray] = {}  # remote rank -> the headers of its senders, one row each
        self._keep: list[object] = []  # send buffers that must live until the sends complete
        self._lent: list[torch.Tensor] = []
        self._received: list[torch.Tensor] = []  # CPU receive buffers, back to the transport on `release`
        self._result: Inbox | None = None

    def _add(self, requests: list[MPI.Request], owner: int, header: bool = False) -> None:
        """Note requests of the remote sending peer `owner` (-1 for this rank's sends)."""
        reqs, owners = self._heads if header else self._rest
        reqs += requests
        owners += [owner] * len(requests)

    def wait(self) -> Inbox:
        """Block until every message of the call has arrived and every send has completed; per local receiver
        of the links, {sender: payload} in ascending sender order."""
        if self._result is not None:
            return self._result
        t = self._t
        t0 = MPI.Wtime()
        received: dict[int, torch.Tensor] = {}
        if t.comm is not None:
            t._wait(self, *self._heads)  # every header is in: post the data receives they announce
            packed: dict[int, tuple[torch.Tensor, list[tuple[int, int]]]] = {}
            for rank in t.remote_ranks:
                packed[rank] = self._post_receives(rank, received)
            t._wait(self, *self._rest)
            received = {q: self._landed(q, buf) for q, buf in received.items()}
            for pack, slots in packed.values():
                received.update(self._unpacked(pack, slots))
            t.pinned.give(self._lent)
        t1 = MPI.Wtime()
        self._result = t._inboxes(self._payloads, received, self._links, self._receivers, self._withheld)
        t.stats.time_wait_s += t1 - t0
        t.stats.time_comm_s += MPI.Wtime() - t1
        self._keep, self._lent, self._heads, self._rest = [], [], ([], []), ([], [])
        return self._result

    def release(self) -> None:
        """The caller is done with the inbox of `wait` (it holds no reference to a received tensor any more):
        their memory may serve a later call. Co-located senders' tensors are never the transport's to reuse."""
        self._t.received.give(self._received)
        self._received, self._result = [], None

    def _post_receives(self, rank: int, received: dict[int, torch.Tensor]
                       ) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """Post the receives the headers from `rank` announce: one for its small payloads packed together, one
        per large payload (into `received`), and for a withheld sender one that nothing matches, so its receiver
        waits for it as for a sender that never came. Returns the pack's buffer and its (sender, offset)s."""
        t = self._t
        heads = self._packs_in.get(rank)
        slots: list[tuple[int, int]] = []
        total = 0
        for k, q in enumerate(self._recvs[rank]):
            head = heads[k]
            self._headers[q] = head
            size = int(head[0])
            if size < 0:  # withheld (fault injection): never coming
                never = np.empty(1, dtype=np.uint8)
                self._keep.append(never)
                self._add([t.comm.Irecv([never, MPI.BYTE], source=rank, tag=t.tag(self.seq, _NEVER, 0))], q)
            elif size > t.pack_bytes:
                received[q] = self._post_data_receive(rank, q)
            else:
                slots.append((q, total))
                total += _padded(size)
                t.stats.wire_recv[rank] += size
        pack = self._pack_buffer(total)
        if total:
            target = pack.numpy() if pack.device.type == "cpu" else pack  # a device pack travels whole, as sent
            self._add(t._post(t.comm.Irecv, target, source=rank, tag=t.tag(self.seq, _PACK, 0)), slots[0][0])
        return pack, slots

    def _pack_buffer(self, size: int) -> torch.Tensor:
        """A host buffer for a received pack: pinned staging when the inboxes land on a GPU (given back when the
        call ends: the pack is copied to the device), else the transport's receive pool (given back at release)."""
        if not size:
            return torch.empty(0, dtype=torch.uint8)
        gpu = self.device.type == "cuda"
        if gpu and self._t.cuda_aware:  # straight into device memory (the sender's pack is a device tensor too)
            return torch.empty(size, dtype=torch.uint8, device=self.device)
        raw = self._t.pinned.take(size, rounded=True) if gpu else self._t.received.take(size, rounded=True)
        (self._lent if gpu else self._received).append(raw)
        return raw[:size]

    def _unpacked(self, pack: torch.Tensor, slots: list[tuple[int, int]]) -> dict[int, torch.Tensor]:
        """Each packed sender's payload: a view into the pack (on the inboxes' device, copied there once)."""
        if not slots:
            return {}
        landed = pack.to(self.device) if self.device.type == "cuda" else pack
        out = {}
        for q, offset in slots:
            head = self._headers[q]
            size, code, ndim = int(head[0]), int(head[1]), int(head[2])
            shape = tuple(int(s) for s in head[3:3 + ndim])
            dtype = _DTYPES[code]
            out[q] = (landed[offset:offset + size].view(dtype).view(shape) if size
                      else torch.empty(shape, dtype=dtype, device=self.device))
        return out

    def _post_data_receive(self, rank: int, q: int) -> torch.Tensor:
        head = self._headers[q]
        size, code, ndim = int(head[0]), int(head[1]), int(head[2])
        shape = tuple(int(s) for s in head[3:3 + ndim])
        t = self._t
        gpu = self.device.type == "cuda"
        if gpu and t.cuda_aware:
            buf = torch.empty(shape, dtype=_DTYPES[code], device=self.device)
            target: np.ndarray | torch.Tensor = buf.reshape(-1).view(torch.uint8) if size else buf
        else:
            raw = t.pinned.take(size) if gpu else t.received.take(size)
            (self._lent if gpu else self._received).append(raw)
            buf = raw.view(_DTYPES[code]).view(shape) if size else torch.empty(shape, dtype=_DTYPES[code])
            target = raw.numpy()
        if size:
            self._add(t._post(t.comm.Irecv, target, source=rank, tag=t.tag(self.seq, q, 1)), q)
        t.stats.wire_recv[rank] += size
        return buf

    def _landed(self, q: int, buf: torch.Tensor) -> torch.Tensor:
        return buf.to(self.device) if buf.device != self.device else buf


class Transport:
    """Neighbour exchange for the peers hosted by this rank."""

    def __init__(self, world: World, graph: nx.Graph, placement: Placement, timeout: float,
                 chunk_bytes: int = 1 << 30, cuda_aware: bool = False, pack_bytes: int = PACK_BYTES) -> None:
        self.world = world
        self.placement = placement
        self.timeout = timeout
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.cuda_aware = cuda_aware
        self.pack_bytes = pack_bytes  # payloads up to this size travel packed, one message per pair of ranks
        self.local_peers = placement.peers_of(world.rank)
        self.neighbors = {p: tuple(sorted(int(q) for q in graph.neighbors(p))) for p in graph.nodes}
        self.stats = CommStats()
        self.pinned = _Buffers(pinned=True)
        self.received = _Buffers(pinned=False)
        remote = sorted({placement.rank_of(q) for p in self.local_peers for q in self.neighbors[p]} - {world.rank})
        self.remote_ranks = remote
        self.comm = world.neighbour_comm(remote)
        self.calls = 0  # the sequence number of the next call: every rank counts its calls alike
        span = 4  # peer slots 0-2 of part 0 tag a call's header pack, data pack and never-matched receives
        while span < placement.n_peers and span < (1 << 14):
            span <<= 1
        self._peer_span = span
        tag_ub = self.comm.Get_attr(MPI.TAG_UB) if self.comm is not None else (1 << 29) - 1
        self._seq_span = (int(tag_ub) + 1) // (2 * span)
        #: The world's (one per process, shared with its collectives; ends the job with watchdog.TIMEOUT_EXIT).
        self._watchdog = world.watchdog if self.comm is not None else None
        #: The plan of the last links seen (the same mapping object round after round on a static network).
        self._planned: tuple[Links, tuple[dict[int, list[int]], dict[int, list[int]], set[int]]] | None = None
        self._arrays: tuple[Links, LinkArrays] | None = None

    def tag(self, seq: int, peer: int, part: int) -> int:
        """The tag of `peer`'s header (part 0) or data (part 1) in call `seq`."""
        return ((seq % self._seq_span) * self._peer_span + peer % self._peer_span) * 2 + part

    def all_links(self, peers: Iterable[int] | None = None) -> dict[int, tuple[int, ...]]:
        """Every support edge both ways among `peers` (default: all peers): the static exchange."""
        keep = set(self.neighbors) if peers is None else set(peers)
        return {p: tuple(q for q in self.neighbors[p] if q in keep) for p in sorted(keep)}

    def exchange(self, payloads: Mapping[int, torch.Tensor], round: int, links: Links | None = None,
                 withheld: Collection[int] = ()) -> Inbox:
        """`start(...).wait()`: the blocking call."""
        return self.start(payloads, round, links, withheld).wait()

    def start(self, payloads: Mapping[int, torch.Tensor], round: int, links: Links | None = None,
              withheld: Collection[int] = ()) -> Pending:
        """Send the local peers' payloads along `links` (receiver -> senders; default every support edge both
        ways) and post the receives; returns at once. Every local sender of the links needs a payload; a sender
        in `withheld` sends nothing to other ranks (fault injection). The payloads must not change until `wait`.
        Every rank makes the same calls in the same order (their sequence numbers match the messages)."""
        links = self.all_links() if links is None else links
        seq = self.calls
        self.calls += 1
        t0 = MPI.Wtime()
        receivers = [p for p in self.local_peers if p in links]
        sends, recvs, senders = self._planned_for(links)
        if not senders.issubset(payloads):
            missing = sorted(senders - set(payloads))
            raise ValueError(f"transport: rank {self.world.rank} sends for {missing} but holds no payload for them")
        pending = Pending(self, seq, round, payloads, links, receivers, recvs, withheld)
        if self.comm is not None:
            for rank in self.remote_ranks:
                if recvs[rank]:
                    heads = np.empty((len(recvs[rank]), _HEADER), dtype=np.int64)
                    pending._packs_in[rank] = heads
                    request = self.comm.Irecv([heads, MPI.INT64_T], source=rank, tag=self.tag(seq, _HEADS, 0))
                    pending._add([request], recvs[rank][0], header=True)
                    self.stats.header_recv[rank] += heads.nbytes
            for rank in self.remote_ranks:
                if sends[rank]:
                    self._post_sends(pending, rank, [(p, None if p in withheld else payloads[p]) for p in sends[rank]])
        self.stats.time_comm_s += MPI.Wtime() - t0
        return pending

    def _post_sends(self, pending: Pending, rank: int, outgoing: list[tuple[int, torch.Tensor | None]]) -> None:
        """Send `rank` one message of every header (a withheld sender's marked so), one of the small payloads
        packed (each padded to 16 bytes, so every payload's view keeps its alignment) and one per large payload."""
        heads = np.empty((len(outgoing), _HEADER), dtype=np.int64)
        small: list[torch.Tensor] = []
        for k, (p, payload) in enumerate(outgoing):
            if payload is None:
                heads[k] = 0
                heads[k, 0] = -1
                continue
            heads[k] = _header(payload)
            size = int(heads[k, 0])
            self.stats.wire_sent[rank] += size
            if size > self.pack_bytes:
                self._post_data(pending, rank, p, payload)
            elif size:
                flat = payload.contiguous().reshape(-1).view(torch.uint8)
                small.append(flat)
                if _padded(size) > size:
                    small.append(torch.zeros(_padded(size) - size, dtype=torch.uint8, device=flat.device))
        pending._keep.append(heads)
        pending._add([self.comm.Isend([heads, MPI.INT64_T], dest=rank, tag=self.tag(pending.seq, _HEADS, 0))], -1)
        self.stats.header_sent[rank] += heads.nbytes
        if small:
            pack = torch.cat(small)
            view = self._wire_view(pending, pack, rounded=True)
            pending._keep += [pack, view]
            pending._add(self._post(self.comm.Isend, view, dest=rank, tag=self.tag(pending.seq, _PACK, 0)), -1)

    def _post_data(self, pending: Pending, rank: int, p: int, payload: torch.Tensor) -> None:
        """A large payload's data, in a message of its own (no copy on the CPU)."""
        view = self._wire_view(pending, payload)
        pending._keep.append(view)
        pending._add(self._post(self.comm.Isend, view, dest=rank, tag=self.tag(pending.seq, p, 1)), -1)

    def _wire_view(self, pending: Pending, payload: torch.Tensor, rounded: bool = False) -> np.ndarray | torch.Tensor:
        """A buffer MPI can read for `payload`: its bytes on the CPU or with CUDA-aware MPI, else pinned staging
        (`rounded`: from the power-of-two pool of packs)."""
        flat = payload.contiguous()
        if flat.device.type == "cpu":
            return _host_array(flat)
        if self.cuda_aware:
            return flat.reshape(-1).view(torch.uint8)
        size = nbytes(flat)
        base = self.pinned.take(size, rounded=rounded)
        pending._lent.append(base)
        staged = base[:size]
        staged.copy_(flat.reshape(-1).view(torch.uint8))
        return staged.numpy()

    def _planned_for(self, links: Links) -> tuple[dict[int, list[int]], dict[int, list[int]], set[int]]:
        """`_plan` of `links`, kept for the next call with the very same mapping (a static network's)."""
        if self._planned is None or self._planned[0] is not links:
            self._planned = (links, self._plan(links))
        return self._planned[1]

    def _plan(self, links: Links) -> tuple[dict[int, list[int]], dict[int, list[int]], set[int]]:
        """Per remote rank: the local peers whose payload goes there, and the remote peers whose payload comes
        here, ascending; and every local peer that sends along `links`. Array code over the links, O(links)."""
        me = self.world.rank
        arrays = self._arrays_of(links)
        receiver, sender = np.repeat(arrays.receivers, arrays.lengths), arrays.senders
        ranks = self.placement.ranks
        at, src = ranks[receiver], ranks[sender]
        local = {int(q) for q in np.unique(sender[src == me])}
        if self.comm is None:
            return {}, {}, local
        out, inn = (src == me) & (at != me), (at == me) & (src != me)
        outside = (set(np.unique(at[out]).tolist()) | set(np.unique(src[inn]).tolist())) - set(self.remote_ranks)
        if outside:
            raise ValueError(f"transport: links to rank(s) {sorted(outside)} outside the support graph")
        sends = {r: np.unique(sender[out & (at == r)]).tolist() for r in self.remote_ranks}
        recvs = {r: np.unique(sender[inn & (src == r)]).tolist() for r in self.remote_ranks}
        return sends, recvs, local

    def _chunks(self, flat: np.ndarray) -> Iterable[np.ndarray]:
        for start in range(0, flat.size, self.chunk_bytes):
            yield flat[start:start + self.chunk_bytes]

    def _post(self, start: Callable[..., MPI.Request], buf: np.ndarray | torch.Tensor,
              **where: int) -> list[MPI.Request]:
        """Start a send or receive of one byte buffer: host memory in chunks of at most `chunk_bytes`, a GPU
        buffer (CUDA-aware MPI) whole. `where` is the peer rank and the tag."""
        if isinstance(buf, np.ndarray):
            return [start([chunk, MPI.BYTE], **where) for chunk in self._chunks(buf)]
        return [start(buf, **where)]

    def _inboxes(self, payloads: Mapping[int, torch.Tensor], received: dict[int, torch.Tensor], links: Links,
                 receivers: list[int], withheld: Collection[int]) -> Inbox:
        """Per local receiver, its senders' payloads: a co-located sender's tensor itself, a remote one's
        received copy. Counts the logical bytes of every link at both of its ends (a withheld sender's as
        not sent)."""
        by_sender = {**received, **payloads}
        arrays = self._arrays_of(links)
        stats = self.stats
        size = np.zeros(self.placement.n_peers, dtype=np.int64)
        size[np.fromiter(by_sender, dtype=np.int64, count=len(by_sender))] = [nbytes(t) for t in by_sender.values()]
        heard = np.concatenate([[0], np.cumsum(size[arrays.senders])])
        rows = arrays.row_of
        for p in receivers:
            i = rows[p]
            if arrays.lengths[i]:
                stats.peer_recv[p] += int(heard[arrays.starts[i + 1]] - heard[arrays.starts[i]])
        ranks, me = self.placement.ranks, self.world.rank
        sending = {q for q in payloads if q not in withheld and ranks[q] == me}
        if stats.track_links:
            for p, senders in links.items():
                for q in sending.intersection(senders):
                    stats.peer_sent[q] += int(size[q])
                    stats.link_sent[(q, p)] += int(size[q])
        else:
            fanout = arrays.fanout
            for q in sorted(sending):
                if fanout.get(q):
                    stats.peer_sent[q] += int(size[q]) * fanout[q]
        return SenderInbox(by_sender, links, arrays, receivers)

    def _arrays_of(self, links: Links) -> LinkArrays:
        """`links` as arrays, kept for the next call with the very same mapping (a static network's)."""
        if self._arrays is None or self._arrays[0] is not links:
            self._arrays = (links, LinkArrays.of(links))
        return self._arrays[1]

    def _wait(self, pending: Pending, requests: list[MPI.Request], owner: list[int]) -> None:
        """Wait for `requests`; past the timeout the watchdog names a missing neighbour and the round."""
        if not requests:
            return
        done = np.zeros(len(requests), dtype=bool)

        def describe(expiry: Expiry) -> str:
            missing = sorted({owner[i] for i in range(len(requests)) if not done[i] and owner[i] >= 0})
            if not missing:
                return (f"p2pfl: timeout: rank {self.world.rank} waited {expiry.seconds()} s in round "
                        f"{pending.round} for its sends to complete{expiry.when()}{expiry.absent(always=False)}")
            q = missing[0]
            waiter = next(p for p in pending._receivers if q in pending._links[p])
            return (f"p2pfl: timeout: peer {waiter} (rank {self.world.rank}) waited {expiry.seconds()} s in round "
                    f"{pending.round} for neighbour {q} (rank {self.placement.rank_of(q)})"
                    + (f"; also missing: {missing[1:]}" if len(missing) > 1 else "")
                    + expiry.when() + expiry.absent(always=False))

        if self._watchdog is not None:  # None: a World made by hand, without a deadline
            # from the call's start (capped at half the timeout back, so a wait after a long computation keeps
            # most of its deadline): a rank that entered a collective after receiving this peer's messages armed
            # later, so the line naming the silent neighbour comes first
            since = max(pending.started, time.monotonic() - self.timeout / 2)
            self._watchdog.arm(self.timeout, describe, since=since)
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
            if self._watchdog is not None:
                self._watchdog.disarm()
