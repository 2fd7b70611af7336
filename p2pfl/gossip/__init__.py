"""Every message a round sends goes through one pipeline: encode (`codec`) -> checked exchange (`checked`: the
transport, decoding, agreement on rejected links) -> combine (`rules`), owned by a round's `Exchanges`
(`exchanges`: combine, lazy check, one agreement for the round's exchanges, recombine, the round's network
without the rejected links); `mix` for gossip, the server's hops and a returning peer's pull. `average` holds the
exact network mean and the consensus distance."""
from p2pfl.gossip.average import consensus_distance, exact_mean
from p2pfl.gossip.checked import CheckedExchange, Delivery, Events, Faults, finite
from p2pfl.gossip.codec import Attacking, Codec, Poisoned
from p2pfl.gossip.exchanges import Exchange, Exchanges
from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import RobustRule, Rule, weighted_sum

__all__ = ["Attacking", "CheckedExchange", "Codec", "Delivery", "Events", "Exchange", "Exchanges", "Faults",
           "Gossip", "Mixed", "Poisoned", "RobustRule", "Rule", "consensus_distance", "exact_mean", "finite",
           "weighted_sum"]
