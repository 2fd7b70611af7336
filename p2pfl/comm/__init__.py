"""Processes, placement of peers on ranks, and the neighbour exchange (the wire lives here alone)."""
from p2pfl.comm.exchange import CommStats, Exchange
from p2pfl.comm.placement import Placement
from p2pfl.comm.world import World

__all__ = ["CommStats", "Exchange", "Placement", "World"]
