"""The Python heap during the rounds: what set-up built is kept out of the garbage collector's passes."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Peers on a process from which its set-up's heap is frozen for the rounds. Freezing costs one full collection
#: first (0.2-0.5 s with torch imported: a large share of a small run); below this many peers the objects a peer
#: leaves are too few for the rounds' collections to notice.
FREEZE_FROM = 128


@contextmanager
def frozen_heap(peers: int) -> Iterator[None]:
    """Freeze every object alive now (gc.freeze) for the block, unfreeze after it, when the process holds at least
    FREEZE_FROM `peers`. Set-up leaves objects a peer and a link (peers, rows of W, link maps) that the cyclic
    collector would otherwise walk again in every full collection the rounds trigger: a round's cost then grows
    with K times the collections. Frozen objects are still freed by reference counting; only cycles among them wait
    for the unfreeze. A process that froze objects of its own is left as it is."""
    if peers < FREEZE_FROM or gc.get_freeze_count() > 0:  # too few, or the process froze its own (a test
        yield                                                 # session its imports): unfreeze would free those
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
