"""Byzantine peers and robust aggregation: what attackers send (`attacks`, made on their side; `omniscient`, made
for each receiver from what it gets) and how honest peers combine what they receive (`aggregators`)."""
from p2pfl.byzantine.aggregators import AGGREGATORS, Robust, Scratch, aggregate, lowered_trim
from p2pfl.byzantine.attacks import ATTACKS, attack_vector, choose_byzantine
from p2pfl.byzantine.omniscient import OMNISCIENT, Adversary, alie_z

__all__ = ["AGGREGATORS", "ATTACKS", "OMNISCIENT", "Adversary", "Robust", "Scratch", "aggregate", "alie_z",
           "attack_vector", "choose_byzantine", "lowered_trim"]
