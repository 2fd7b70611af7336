"""p2pfl: a decentralised peer-to-peer learning simulator (distribution name ``p2pfl-sim``)."""
__version__ = "0.1.0"
