"""--compress none: the identity codec, the dense vector travels (the exchange's own codec, so a run sends what it
sent before compression existed)."""
from __future__ import annotations

from typing import Any, ClassVar

from p2pfl.gossip.codec import Codec
from p2pfl.gossip.compress import CODECS
from p2pfl.registry import Component


@CODECS.register("none")
class Dense(Codec, Component):
    """The vector itself."""

    #: "dense": nothing to encode; the run keeps the exchange's own codec and records no compression.
    capabilities: ClassVar[frozenset[str]] = frozenset({"dense"})

    @classmethod
    def from_config(cls, cfg: Any) -> Dense:
        return cls()
