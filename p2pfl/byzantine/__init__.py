"""Byzantine peers and robust aggregation: what attackers send (`attacks`, made on their side, or for each receiver
from what it gets: `omniscient`) and how honest peers combine what they receive (`aggregators`); each attack and
aggregator a registered component, one file each."""
from p2pfl.byzantine.aggregators import AGGREGATORS, aggregate, lowered_trim
from p2pfl.byzantine.attacks import ATTACKS, attack_vector
from p2pfl.byzantine.attacks.alie import alie_z
from p2pfl.byzantine.omniscient import Adversary
from p2pfl.byzantine.robust import Robust, Scratch, choose_byzantine

__all__ = ["AGGREGATORS", "ATTACKS", "Adversary", "Robust", "Scratch", "aggregate", "alie_z", "attack_vector",
           "choose_byzantine", "lowered_trim"]
