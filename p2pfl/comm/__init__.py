"""Processes, placement of peers on ranks, and the transport between them (the wire lives here alone)."""
from p2pfl.comm.placement import Placement
from p2pfl.comm.transport import CommStats, Pending, Transport
from p2pfl.comm.world import World

__all__ = ["CommStats", "Pending", "Placement", "Transport", "World"]
