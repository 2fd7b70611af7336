"""Byzantine peers and robust aggregation: what attackers send (`attacks`) and how honest peers combine what
they receive (`aggregators`)."""
from p2pfl.byzantine.aggregators import AGGREGATORS, Robust, Scratch, aggregate
from p2pfl.byzantine.attacks import ATTACKS, attack_vector, choose_byzantine

__all__ = ["AGGREGATORS", "ATTACKS", "Robust", "Scratch", "aggregate", "attack_vector", "choose_byzantine"]
