"""The package's version, in a module of its own: what the manifest records needs no import of the package's
lazy entry points (p2pfl.simulate)."""
__version__ = "0.1.0"
