"""Under mpirun: --gossip average with every --compress codec, on consensus and on the quadratic problem, all in
one job (and CHOCO on the quadratic problem with each codec, links failing and peers churning).

Run as `mpirun -n R python tests/mpi/compress_runs.py OUT`; each run writes its folder OUT/<algorithm>-<codec>.
tests/test_compress_ranks.py compares the metrics of the same runs on 1, 2 and 4 ranks (8 peers on a cycle, float64).
"""
from __future__ import annotations

import sys

from network_runs import main  # this folder: run as a script

from p2pfl.gossip.compress import CODECS

COMMON = ["--peers", "8", "--topology", "cycle", "--rounds", "5", "--seed", "5", "--compress-ratio", "0.1",
          "--qsgd-levels", "4"]
PROBLEMS: dict[str, list[str]] = {
    "consensus": ["--algorithm", "consensus", "--vector-size", "600", "--vector-dtype", "float64", "--eval-every", "2",
                  "--gossip", "average"],
    "quadratic": ["--algorithm", "quadratic", "--dim", "40", "--dtype", "float64", "--lr", "0.05", "--sgd-noise", "0.1",
                  "--eval-every", "0", "--gossip", "average"],
    "choco": ["--algorithm", "quadratic", "--dim", "40", "--dtype", "float64", "--lr", "0.05", "--sgd-noise", "0.1",
              "--eval-every", "0", "--gossip", "choco", "--consensus-step", "0.3", "--link-failure", "0.3",
              "--churn", "0.2"],  # lagging links: replays and resets travel between ranks
}
RUNS: dict[str, list[str]] = {f"{problem}-{codec}": [*COMMON, *args, "--compress", codec]
                              for problem, args in PROBLEMS.items() for codec in CODECS.names()}


if __name__ == "__main__":
    main(sys.argv[1], RUNS)
