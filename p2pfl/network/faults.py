"""Who fails when: crashes (--crash), stragglers (--stragglers), read from the options once and seeded."""
from __future__ import annotations

import math
import re

from p2pfl.seeding import SHARED, numpy_rng

#: One --crash entry: a peer id or a fraction of the peers (0.15 or 15%), '@', the first round it is down.
CRASH_ENTRY = re.compile(r"\s*(?:(?P<peer>\d+)|(?P<frac>\d*\.\d+|\d+(?:\.\d*)?%))\s*@\s*(?P<round>\d+)\s*")


def crash_syntax_error(spec: str) -> str | None:
    """Why `spec` is not a list of P@R / F@R entries, or None when it is."""
    for entry in spec.split(","):
        m = CRASH_ENTRY.fullmatch(entry)
        if m is None:
            return f"expected entries PEER@ROUND or FRACTION@ROUND (0.15@3, 15%@3) separated by commas, got {entry!r}"
        if int(m["round"]) < 1:
            return f"the round of a crash is 1 or later, got {entry.strip()!r}"
        if m["frac"] is not None and not 0.0 < _fraction(m["frac"]) < 1.0:
            return f"a fraction of peers lies in (0, 1), got {entry.strip()!r}"
    return None


def _fraction(text: str) -> float:
    return float(text[:-1]) / 100.0 if text.endswith("%") else float(text)


def parse_crashes(spec: str | None, n_peers: int, seed: int) -> dict[int, int]:
    """Peer -> the first round it is down. Named peers must exist; a fraction F crashes round(F·K) (at least 1)
    peers drawn from the stream (seed, SHARED, 'crash/<i>') among those not named before. A peer named twice
    crashes at its earliest round. ValueError on a peer that does not exist."""
    if spec is None:
        return {}
    error = crash_syntax_error(spec)
    if error:
        raise ValueError(f"--crash: {error}")
    out: dict[int, int] = {}
    for i, entry in enumerate(spec.split(",")):
        m = CRASH_ENTRY.fullmatch(entry)
        assert m is not None
        when = int(m["round"])
        if m["peer"] is not None:
            peer = int(m["peer"])
            if peer >= n_peers:
                raise ValueError(f"--crash: peer {peer} does not exist (peers are 0..{n_peers - 1})")
            out[peer] = min(when, out.get(peer, when))
            continue
        count = max(1, round(_fraction(m["frac"]) * n_peers))
        pool = [p for p in range(n_peers) if p not in out]
        if count > len(pool):
            raise ValueError(f"--crash: {entry.strip()!r} asks for {count} peers, only {len(pool)} are left")
        for p in numpy_rng(seed, SHARED, f"crash/{i}").choice(pool, size=count, replace=False):
            out[int(p)] = when
    return dict(sorted(out.items()))


def choose_stragglers(seed: int, n_peers: int, fraction: float, work: float) -> dict[int, float]:
    """Peer -> the fraction of its local steps it does: ⌈fraction·K⌉ peers from the stream (seed, SHARED,
    'stragglers'), fixed for the run (slow hardware, not bad luck)."""
    if fraction <= 0.0:
        return {}
    count = min(n_peers, math.ceil(fraction * n_peers))
    chosen = numpy_rng(seed, SHARED, "stragglers").choice(n_peers, size=count, replace=False)
    return {int(p): float(work) for p in sorted(chosen)}
