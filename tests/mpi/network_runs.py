"""Under mpirun: one short run per kind of changing or failing network, all in one job.

Run as `mpirun -n R python tests/mpi/network_runs.py OUT`; each run writes its folder OUT/<kind>. The test
compares the metrics of the same runs on 1, 2 and 4 ranks (7 peers: more peers than ranks, and with 4 ranks
peer 6 alone on the last rank, which its crash leaves without an alive peer).
"""
from __future__ import annotations

import sys

from p2pfl.comm import World
from p2pfl.run import _run

CONSENSUS = ["--algorithm", "consensus", "--peers", "7", "--rounds", "6", "--vector-size", "3000",
             "--eval-every", "3", "--seed", "11"]
TRAINING = ["--peers", "7", "--rounds", "3", "--dataset", "synthetic", "--train-subset", "280", "--batch-size", "16",
            "--local-steps", "2", "--eval-every", "0", "--seed", "11", "--model", "simple-cnn",
            "--batch-peers", "off"]  # compared bit for bit across layouts
RUNS: dict[str, list[str]] = {
    "link-failure": [*CONSENSUS, "--topology", "cycle", "--link-failure", "0.3"],
    "churn-crash": [*CONSENSUS, "--topology", "cycle", "--churn", "0.3", "--crash", "6@2"],
    "resample": [*CONSENSUS, "--topology", "random", "--p", "0.5", "--resample"],
    "random-matching": [*CONSENSUS, "--topology", "random-matching"],
    "one-peer-exponential": [*CONSENSUS, "--topology", "one-peer-exponential"],
    "server": [*CONSENSUS, "--topology", "star", "--mixing", "server", "--participation", "0.5"],
    "fedavg-faults": [*TRAINING, "--algorithm", "fedavg", "--optimizer", "sgd", "--lr", "0.02", "--topology", "cycle",
                      "--stragglers", "0.3", "--churn", "0.2", "--crash", "2@2", "--link-failure", "0.2"],
    "nan-messages": [*CONSENSUS, "--topology", "random", "--p", "0.5", "--fault", "nan@3:2"],
    "byzantine-clipped": [*CONSENSUS, "--topology", "random", "--p", "0.6", "--byzantine", "2", "--attack", "alie",
                          "--aggregator", "clipped-gossip", "--trim", "2"],
    "fedmuscle-exponential": [*TRAINING, "--algorithm", "fedmuscle", "--topology", "one-peer-exponential",
                              "--public-size", "100", "--public-batch", "8", "--rep-dim", "16", "--muscle-m", "2"],
}


def main(out: str, runs: dict[str, list[str]] = RUNS) -> None:
    """Each of `runs` in turn, in this job's world, into OUT/<name>."""
    world = World.detect()
    for name, args in runs.items():
        _run(world, [*args, "--out", out, "--name", name, "--timeout", "30", "--no-progress", "--no-plots"])


if __name__ == "__main__":
    main(sys.argv[1])
