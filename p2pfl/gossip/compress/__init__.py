"""Compressed gossip's codecs (SPEC §8), one file each registering itself in `CODECS`, chosen by --compress:
none (the identity codec, the dense vector travels), top-k, random-k, qsgd and scaled sign. Each encodes a vector
into one uint8 message (p2pfl.gossip.compress.message), whose size is what the transport counts, and decodes it
back to a dense vector; each is built from the configuration (`from_config`) and says what the manifest records of
it (`record`)."""
from __future__ import annotations

from typing import Any

from p2pfl.gossip.codec import Codec
from p2pfl.registry import Registry

#: The codecs, by their --compress name (p2pfl.gossip.compress.base.Compressor, or none.Dense).
CODECS: Registry[Any] = Registry("codec", option="compress", package="p2pfl.gossip.compress")


def make(cfg: Any) -> Codec:
    """The codec a configuration's --compress names, built from its options."""
    return CODECS.get(cfg.compress).from_config(cfg)
