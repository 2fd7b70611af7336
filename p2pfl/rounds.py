"""The names code written against p2pfl.rounds imports, where they now live: the run context (p2pfl.context),
the method interface (p2pfl.method), the runner (p2pfl.runner) and its round records (p2pfl.round_records)."""
from p2pfl.context import RunContext
from p2pfl.method import ASYNCHRONOUS, BATCHABLE, Algorithm, LocalRound, Phase
from p2pfl.round_records import SPECTRAL_MAX_PEERS
from p2pfl.runner import Runner

__all__ = ["ASYNCHRONOUS", "BATCHABLE", "SPECTRAL_MAX_PEERS", "Algorithm", "LocalRound", "Phase", "RunContext",
           "Runner"]
