"""The Python heap during the rounds: what set-up built is kept out of the garbage collector's passes."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze every object alive now (gc.freeze) for the block, unfreeze after it. Set-up leaves objects a peer
    and a link (peers, rows of W, link maps) that the cyclic collector would otherwise walk again in every
    full collection the rounds trigger: a round's cost then grows with K times the collections. Frozen objects
    are still freed by reference counting; only cycles among them wait for the unfreeze."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
