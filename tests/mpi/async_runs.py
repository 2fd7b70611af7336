"""Under mpirun: asynchronous runs (--mode async), all in one job; each writes OUT/<name>.

The test compares their records on 1, 2 and 4 ranks (7 peers, so ranks host unequal numbers of peers).
"""
from __future__ import annotations

import sys

from network_runs import main

CLOCK = ["--mode", "async", "--peers", "7", "--seed", "5", "--compute-time", "1", "--compute-spread", "0.4",
         "--latency", "0.05", "--upload-rate", "2e6"]
RUNS: dict[str, list[str]] = {
    "consensus": [*CLOCK, "--algorithm", "consensus", "--topology", "random", "--p", "0.5", "--vector-size", "3000",
                  "--vector-dtype", "float64", "--updates", "40", "--eval-every-s", "2"],
    "fedavg": [*CLOCK, "--algorithm", "fedavg", "--topology", "cycle", "--dataset", "synthetic", "--train-subset",
               "280", "--batch-size", "16", "--local-steps", "2", "--optimizer", "sgd", "--lr", "0.02",
               "--model", "simple-cnn", "--batch-peers", "off", "--sim-time", "12", "--eval-every-s", "4",
               "--stragglers", "0.3", "--straggler-work", "1", "--straggler-slowdown", "3"],
}

if __name__ == "__main__":
    main(sys.argv[1], RUNS)
