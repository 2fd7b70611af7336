"""Compressed gossip's codecs (SPEC §8), one file each: top-k, random-k, qsgd and scaled sign, chosen by
--compress (none: the identity codec, the dense vector travels). Each encodes a vector into one uint8 message
(p2pfl.gossip.compress.message), whose size is what the transport counts, and decodes it back to a dense vector."""
from __future__ import annotations

from p2pfl.gossip.codec import Codec

#: The --compress values.
NAMES = ("none", "top-k", "random-k", "qsgd", "sign")


def make(name: str, ratio: float, levels: int, seed: int) -> Codec:
    """The codec --compress `name` runs (ratio: --compress-ratio ρ, levels: --qsgd-levels s)."""
    from p2pfl.gossip.compress.qsgd import QSGD
    from p2pfl.gossip.compress.randomk import RandomK
    from p2pfl.gossip.compress.sign import Sign
    from p2pfl.gossip.compress.topk import TopK
    made = {"none": Codec, "top-k": lambda: TopK(ratio), "random-k": lambda: RandomK(ratio, seed),
            "qsgd": lambda: QSGD(levels, seed), "sign": Sign}
    if name not in made:
        raise ValueError(f"--compress: unknown value '{name}'; allowed: {', '.join(NAMES)}")
    return made[name]()
