"""The network model of simulated time (SPEC §9): what a local step and a message cost in seconds.

Every peer i has a compute time per local step c_i; every link (i, j) a latency a_ij; every peer an upload
capacity U_i and a download capacity D_i in bytes per second, shared equally by its concurrent transfers. A
message of S bytes from i to j takes

    a_ij + S / min(U_i / k_i, D_j / k_j),

k_i the number of transfers i sends in the round and k_j the number j receives. A synchronous round costs each
peer its compute (its local steps times c_i, a straggler's share of them included) plus its slowest transfer, one
it sends or one it receives; the round ends when the slowest peer is done. Infinite capacities (the default)
make a transfer cost its latency alone. With --gossip-steps S a round's gossip is S exchanges one after another:
each link pays its latency S times and carries S messages' bytes.

The arrays come from the run's network model (p2pfl.network.clock, --network-model; the default, "links", is
what follows), a pure function of the options and the seed: c_i = c · exp(σ z_i) with z_i ~ N(0, 1) from the
stream (seed, i, "compute-time") (a log-normal spread of median c), or a trace of per-peer seconds; peers listed
as slow take `factor` times longer. Every rank builds the same model.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from p2pfl.runtime.limits import array_bytes, check_bytes, check_file_size, human, npy_header
from p2pfl.seeding import numpy_rng

Link = tuple[int, int]  # (sender, receiver)
#: The most bytes a trace's text may take per number it must hold: a float64 written in full is 24 characters
#: ("-1.2345678901234567e-100"); the rest leaves room for spaces, quotes and a comment a line.
TEXT_BYTES = 64
#: And besides its numbers: a header of comments.
TEXT_SLACK = 64 * 1024


@dataclass(frozen=True)
class RoundTime:
    """One synchronous round in simulated seconds: the round's duration and, per peer, its compute, its slowest
    transfer and its idle time (waiting for the slowest peer)."""

    duration: float
    compute: dict[int, float]
    transfer: dict[int, float]
    idle: dict[int, float]


@dataclass(frozen=True)
class NetworkModel:
    """Per-peer compute seconds per local step, per-link latency seconds (K × K) and per-peer upload and download
    capacities in bytes per second (np.inf: unlimited); `about`: what the network model that made them records
    (p2pfl.network.clock)."""

    compute: np.ndarray
    latency: np.ndarray
    upload: np.ndarray
    download: np.ndarray
    about: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = len(self.compute)
        for name, shape in (("latency", (k, k)), ("upload", (k,)), ("download", (k,))):
            if getattr(self, name).shape != shape:
                raise ValueError(f"network model: {name} must have shape {shape}, got {getattr(self, name).shape}")
        for name in ("compute", "latency", "upload", "download"):
            values = getattr(self, name)
            if np.isnan(values).any() or (values < 0).any():
                raise ValueError(f"network model: {name} must be non-negative numbers")
        if (self.upload == 0).any() or (self.download == 0).any():
            raise ValueError("network model: a bandwidth must be positive (np.inf: unlimited)")

    @property
    def n_peers(self) -> int:
        return len(self.compute)

    def describe(self) -> dict[str, Any]:
        """The manifest's `clock` entry: per-peer step seconds, the latency range and the capacities (None:
        unlimited)."""
        def capacity(values: np.ndarray) -> list[float | None]:
            return [None if np.isinf(v) else float(v) for v in values]

        off = self.latency[~np.eye(self.n_peers, dtype=bool)]
        return {**self.about, "compute_s_per_step": [float(c) for c in self.compute],
                "latency_s": {"min": float(off.min(initial=0.0)), "max": float(off.max(initial=0.0))},
                "upload_bytes_per_s": capacity(self.upload), "download_bytes_per_s": capacity(self.download)}

    def transfers(self, sizes: Mapping[Link, int], exchanges: int = 1) -> dict[Link, float]:
        """Seconds of each of a round's concurrent transfers, (sender, receiver) -> S bytes; `exchanges`: how many
        exchanges one after another carried them (--gossip-steps), each paying the link's latency once."""
        sends = np.zeros(self.n_peers, dtype=int)
        receives = np.zeros(self.n_peers, dtype=int)
        for i, j in sizes:
            sends[i] += 1
            receives[j] += 1
        out = {}
        for (i, j), size in sizes.items():
            rate = min(self.upload[i] / sends[i], self.download[j] / receives[j])
            out[(i, j)] = float(exchanges * self.latency[i, j] + (size / rate if size else 0.0))
        return out

    def round_time(self, steps: Mapping[int, float], sizes: Mapping[Link, int], exchanges: int = 1) -> RoundTime:
        """A synchronous round of the peers in `steps` (peer -> local steps it takes, fractional for a straggler
        doing part of them) exchanging `sizes` in `exchanges` exchanges one after another (SPEC §9; see the module
        docstring)."""
        compute = {p: float(n * self.compute[p]) for p, n in steps.items()}
        slowest = dict.fromkeys(steps, 0.0)
        for (i, j), seconds in self.transfers(sizes, exchanges).items():
            for p in (i, j):
                if p in slowest:
                    slowest[p] = max(slowest[p], seconds)
        done = {p: compute[p] + slowest[p] for p in steps}
        duration = max(done.values(), default=0.0)
        return RoundTime(duration, compute, slowest, {p: duration - t for p, t in done.items()})


def compute_times(n_peers: int, seed: int, seconds: float, spread: float = 0.0, trace: str | Path | None = None,
                  slow: Collection[int] = (), factor: float = 1.0) -> np.ndarray:
    """c_i per peer: the trace's (one number per peer, in peer order: a CSV or text column), or `seconds` with a
    log-normal spread σ = `spread` (median `seconds`); the `slow` peers' times multiplied by `factor`."""
    if trace is not None:
        _text_fits("--compute-trace", trace, n_peers)
        values = _numbers("--compute-trace", trace, lambda: np.loadtxt(
            trace, delimiter="," if str(trace).endswith(".csv") else None, ndmin=1, dtype=float)).reshape(-1)
        if len(values) != n_peers:
            raise ValueError(f"--compute-trace {trace}: {len(values)} times for {n_peers} peers")
        if not (np.isfinite(values) & (values > 0)).all():
            raise ValueError(f"--compute-trace {trace}: every step time must be a positive number of seconds")
    else:
        z = np.array([numpy_rng(seed, p, "compute-time").standard_normal() for p in range(n_peers)])
        values = seconds * np.exp(spread * z) if spread else np.full(n_peers, float(seconds))
    values = values.astype(float).copy()
    for p in slow:
        values[p] *= factor
    return values


def latencies(n_peers: int, seconds: float = 0.0, matrix: str | Path | None = None) -> np.ndarray:
    """a_ij: one constant for every link, or a K × K matrix file (.npy, its header checked before it is loaded; or
    CSV / whitespace text, at most TEXT_BYTES a number)."""
    if matrix is None:
        return np.full((n_peers, n_peers), float(seconds))
    path = Path(matrix)
    check_bytes(f"--latency-matrix {matrix}: a {n_peers} × {n_peers} matrix of float64", n_peers * n_peers * 8)
    if path.suffix == ".npy":
        _npy_fits("--latency-matrix", path, (n_peers, n_peers))
    else:
        _text_fits("--latency-matrix", path, n_peers * n_peers)
    values = _numbers("--latency-matrix", matrix, lambda: np.load(path) if path.suffix == ".npy" else np.loadtxt(
        path, delimiter="," if path.suffix == ".csv" else None, ndmin=2, dtype=float))
    if values.shape != (n_peers, n_peers):
        raise ValueError(f"--latency-matrix {matrix}: shape {values.shape}, need ({n_peers}, {n_peers})")
    if not (np.isfinite(values) & (values >= 0)).all():
        raise ValueError(f"--latency-matrix {matrix}: every latency must be a finite number of seconds >= 0")
    return values.astype(float)


def _text_fits(option: str, path: str | Path, count: int) -> None:
    """Refuse, before np.loadtxt reads it, a text file of `count` numbers larger than TEXT_BYTES a number and
    TEXT_SLACK (a header's comments); a file that cannot be read is left to `_numbers` to name."""
    try:
        check_file_size(f"{option} {path}", path, count * TEXT_BYTES + TEXT_SLACK,
                        f"for {count} numbers ({TEXT_BYTES} bytes a number, {human(TEXT_SLACK)} of comments)")
    except OSError:
        pass


def _npy_fits(option: str, path: Path, shape: tuple[int, ...]) -> None:
    """Refuse, from its header and before np.load allocates what the header says, an .npy file whose array is not
    of `shape`, not of numbers, or larger than the file; a file that cannot be read, or has no .npy header, is left
    to `_numbers`."""
    try:
        with open(path, "rb") as f:
            declared, dtype = npy_header(f)
            data = os.fstat(f.fileno()).st_size - f.tell()
    except (OSError, ValueError):  # no .npy header: np.load says so
        return
    if declared != shape:
        raise ValueError(f"{option} {path}: shape {declared} by its header, need {shape}")
    if dtype.kind not in "biuf":
        raise ValueError(f"{option} {path}: holds {dtype} values, not numbers")
    if array_bytes(declared, dtype) > data:
        raise ValueError(f"{option} {path}: its header declares {human(array_bytes(declared, dtype))} of {dtype}, "
                         f"the file holds {human(data)}")


def _numbers(option: str, path: str | Path, read: Callable[[], np.ndarray]) -> np.ndarray:
    """What `read` reads from the file of `option`, as floats; a file that is not a table of numbers is a
    ValueError naming the option and the file."""
    try:
        values = np.asarray(read())
    except (ValueError, OSError, EOFError) as exc:  # a binary file, a non-number, a damaged .npy
        binary = " (binary: not UTF-8 text)" if isinstance(exc, UnicodeDecodeError) else ""
        raise ValueError(f"{option} {path}: not a table of numbers{binary}") from None
    if values.dtype.kind not in "biuf":
        raise ValueError(f"{option} {path}: holds {values.dtype} values, not numbers")
    return values.astype(float)


def bandwidths(n_peers: int, bytes_per_s: float = 0.0) -> np.ndarray:
    """One capacity for every peer in bytes per second (0: unlimited)."""
    return np.full(n_peers, float(bytes_per_s) if bytes_per_s > 0 else np.inf)


__all__ = ["Link", "NetworkModel", "RoundTime", "bandwidths", "compute_times", "latencies"]
