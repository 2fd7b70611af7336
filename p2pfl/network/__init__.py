"""Networks that change and fail: the seeded per-round network (links, peers up and taking part, weights)."""
from p2pfl.network.faults import choose_stragglers, crash_syntax_error, parse_crashes
from p2pfl.network.schedule import NetworkOptions, NetworkSchedule, RoundNetwork, active_peers
from p2pfl.network.topology_options import TopologyOptions

__all__ = ["NetworkOptions", "NetworkSchedule", "RoundNetwork", "TopologyOptions", "active_peers", "choose_stragglers",
           "crash_syntax_error", "parse_crashes"]
