"""Under mpirun: the noise-then-gossip schemes (--gossip muffliato, --gossip decor) on consensus, on the quadratic
problem and on a trained model, links failing and peers churning, all in one job.

Run as `mpirun -n R python tests/mpi/privacy_runs.py OUT`; each run writes its folder OUT/<name>.
tests/test_privacy_gossip.py compares the records and the ledgers' arrays of the same runs on 1 and 2 ranks.
"""
from __future__ import annotations

import sys

from network_runs import TRAINING, main  # this folder: run as a script

COMMON = ["--peers", "7", "--topology", "cycle", "--rounds", "4", "--seed", "3"]
CONSENSUS = [*COMMON, "--algorithm", "consensus", "--vector-size", "300", "--vector-dtype", "float64",
             "--eval-every", "2"]
QUADRATIC = [*COMMON, "--algorithm", "quadratic", "--dim", "20", "--dtype", "float64", "--lr", "0.05",
             "--sgd-noise", "0.1", "--eval-every", "0"]
RUNS: dict[str, list[str]] = {
    "consensus-muffliato": [*CONSENSUS, "--gossip", "muffliato", "--muffliato-noise", "0.05", "--link-failure", "0.3"],
    "consensus-muffliato-once": [*CONSENSUS, "--gossip", "muffliato", "--muffliato-once", "--gossip-steps", "2",
                                 "--churn", "0.2"],
    "quadratic-decor": [*QUADRATIC, "--gossip", "decor", "--decor-noise", "0.5", "--churn", "0.2"],
    "quadratic-muffliato": [*QUADRATIC, "--gossip", "muffliato", "--gossip-steps", "2"],
    "fedavg-decor": [*TRAINING, "--algorithm", "fedavg", "--optimizer", "sgd", "--lr", "0.02", "--topology", "cycle",
                     "--gossip", "decor", "--link-failure", "0.2"],
    "fedavg-muffliato": [*TRAINING, "--algorithm", "fedavg", "--optimizer", "sgd", "--lr", "0.02", "--topology",
                         "cycle", "--gossip", "muffliato", "--gossip-steps", "2", "--churn", "0.2"],
}


if __name__ == "__main__":
    main(sys.argv[1], RUNS)
