"""A hand list of 20 deliberate bugs, each run against the tests that should catch it (issue 54: evidence that a
faster suite still catches deliberate bugs).

Each mutant is one small, realistic bug in a core module: a wrong sign, an off-by-one, a dropped message, a skipped
integrity check, a wrong weight or constant. For each, the tree is copied to a fresh temporary folder (without
.venv, .git, data-cache, runs, studies and the caches), the mutant's `old` text (which must occur exactly once in its
file) is replaced by `new`, and the mutant's tests run there with the tree's own interpreter:

    <tree>/.venv/bin/python -m pytest -q -x -p no:cacheprovider <tests>

A mutant is caught when pytest reports a failure or an error (exit 1 or 2; a run past the timeout counts as caught
and says so); exit 5 (no tests collected) and any other exit are not. One line per mutant, then "N of M mutants
caught"; the exit status is 1 when any mutant was missed.

    python scripts/mutants.py [--tree DIR] [--only NAME ...] [--list]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 900
#: Left out of the copy: at the tree's top level, and at any depth.
SKIP_TOP = frozenset({".venv", ".git", "data-cache", "runs", "studies"})
SKIP_ANYWHERE = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache"})


class Mutant(TypedDict):
    name: str
    file: str
    old: str
    new: str
    tests: list[str]
    why: str


MUTANTS: list[Mutant] = [
    {"name": "average-sign", "file": "p2pfl/gossip/schemes/average.py",
     "old": "{p: x[p] - lr * g[p] for p in x}", "new": "{p: x[p] + lr * g[p] for p in x}",
     "tests": ["tests/test_gossip_steps.py", "tests/test_decentralised_optimisers.py"],
     "why": "D-PSGD steps up the gradient: x + ηg is mixed instead of x − ηg"},
    {"name": "push-sum-drops-sender", "file": "p2pfl/gossip/schemes/push_sum.py",
     "old": "for j in sorted(received):", "new": "for j in sorted(received)[1:]:",
     "tests": ["tests/test_gossip_steps.py", "tests/test_decentralised_optimisers.py"],
     "why": "push-sum's receiver ignores the message of its lowest-numbered sender (its mass is lost)"},
    {"name": "choco-hat-not-accumulated", "file": "p2pfl/gossip/schemes/choco.py",
     "old": "hat[p] = old + inner.decode(p, clean, round)", "new": "hat[p] = inner.decode(p, clean, round)",
     "tests": ["tests/test_choco.py"],
     "why": "CHOCO's public copy x̂ is replaced by the last compressed difference instead of adding it"},
    {"name": "exchange-skips-check", "file": "p2pfl/gossip/exchanges.py",
     "old": "self._bad = failing(got.inbox, self._rule.suspects(self._results), finite)", "new": "self._bad = []",
     "tests": ["tests/test_exchanges.py", "tests/test_gossip_pipeline.py"],
     "why": "an exchange with a combine rule never checks the messages behind a non-finite result"},
    {"name": "nonfinite-any", "file": "p2pfl/gossip/checked.py",
     "old": "ok = torch.isfinite(block).all(dim=1).tolist()", "new": "ok = torch.isfinite(block).any(dim=1).tolist()",
     "tests": ["tests/test_exchanges.py"],
     "why": "the stacked finiteness check passes a vector with any finite value (one NaN coordinate slips through)"},
    {"name": "inbox-drops-messages", "file": "p2pfl/comm/inbox.py",
     "old": "at = np.searchsorted(self.keys, want)", "new": 'at = np.searchsorted(self.keys, want, side="right")',
     "tests": ["tests/test_gossip_pipeline.py", "tests/test_exchanges.py"],
     "why": "the link lookup misses every link, so the stacked mix treats all messages as not heard (own vector)"},
    {"name": "sparse-keeps-k-minus-1", "file": "p2pfl/gossip/compress/base.py",
     "old": "        return kept(self.ratio, d)\n", "new": "        return kept(self.ratio, d) - 1\n",
     "tests": ["tests/test_compress.py"],
     "why": "top-k (and random-k) send k − 1 coordinates instead of k = ⌈ρ·d⌉"},
    {"name": "qsgd-drops-tau", "file": "p2pfl/gossip/compress/qsgd.py",
     "old": "norm / (s * tau(d, s))", "new": "norm / s",
     "tests": ["tests/test_compress.py"],
     "why": "QSGD's scale forgets the 1/τ rescaling (not contractive any more)"},
    {"name": "trimmed-mean-trims-one-fewer", "file": "p2pfl/byzantine/aggregators/trimmed_mean.py",
     "old": "trim = min(trim, (n - 1) // 2)", "new": "trim = min(trim, max(0, n // 2 - 1))",
     "tests": ["tests/test_byzantine.py"],
     "why": "an odd neighbourhood too small for --trim trims one value fewer per side (median becomes a mean)"},
    {"name": "seeding-drops-peer", "file": "p2pfl/seeding.py",
     "old": "gen.manual_seed(stream_seed(seed, peer, purpose))",
     "new": "gen.manual_seed(stream_seed(seed, SHARED, purpose))",
     "tests": ["tests/test_data_loader_tasks.py"],
     "why": "torch streams drop the peer from their key: every peer draws the same data order and augmentations"},
    {"name": "dp-clip-not-clamped", "file": "p2pfl/privacy/dp_sgd.py",
     "old": "factor = (clip / (squares.sqrt() + NORM_EPS)).clamp(max=1.0)",
     "new": "factor = clip / (squares.sqrt() + NORM_EPS)",
     "tests": ["tests/test_privacy_dp_sgd.py"],
     "why": "DP-SGD scales every per-sample gradient to norm C (small ones are blown up, not left alone)"},
    {"name": "zcdp-conversion", "file": "p2pfl/privacy/gaussian.py",
     "old": "out = rho + 2 * np.sqrt(rho * np.log(1 / delta))",
     "new": "out = rho + np.sqrt(2 * rho * np.log(1 / delta))",
     "tests": ["tests/test_privacy_gossip.py::test_epsilon_conversion_is_the_best_renyi_order"],
     "why": "the ρ-zCDP to (ε, δ) conversion uses √(2ρ log 1/δ) instead of 2√(ρ log 1/δ): ε understated"},
    {"name": "timing-faster-end", "file": "p2pfl/network/timing.py",
     "old": "rate = min(self.upload[i] / sends[i], self.download[j] / receives[j])",
     "new": "rate = max(self.upload[i] / sends[i], self.download[j] / receives[j])",
     "tests": ["tests/test_timing.py", "tests/test_sim_clock.py"],
     "why": "a simulated transfer runs at the faster end's share of bandwidth instead of the bottleneck's"},
    {"name": "checkpoint-digest-skipped", "file": "p2pfl/runtime/checkpoint.py",
     "old": "return None if digests is None else digests[str(peer)]", "new": "return None",
     "tests": ["tests/test_checkpoint.py::test_flipped_bytes_in_a_peer_file_are_refused_and_nothing_changes"],
     "why": "a resume never looks up the recorded sha256 digests, so a damaged peer file loads silently"},
    {"name": "nt-xent-temperature", "file": "p2pfl/losses/simclr.py",
     "old": "logits = (z @ z.t()) / t", "new": "logits = (z @ z.t()) * t",
     "tests": ["tests/test_losses.py"],
     "why": "NT-Xent multiplies the cosine similarities by the temperature instead of dividing"},
    {"name": "fedprox-drops-half", "file": "p2pfl/algorithms/fedavg.py",
     "old": "return 0.5 * self.cfg.mu * prox", "new": "return self.cfg.mu * prox",
     "tests": ["tests/test_baselines.py::test_fedprox_term_and_gradient"],
     "why": "FedProx's proximal term is mu·‖w − w_start‖² instead of (mu/2)·‖w − w_start‖²"},
    {"name": "p-worst-unsquared", "file": "topologies/measures.py",
     "old": "return 1.0 - float(np.linalg.norm(_centred(as_dense(w)), 2)) ** 2",
     "new": "return 1.0 - float(np.linalg.norm(_centred(as_dense(w)), 2))",
     "tests": ["tests/test_topology_measures.py"],
     "why": "the spectral measure p = 1 − ‖W − J‖₂² forgets the square (1 − |λ2| instead of 1 − |λ2|²)"},
    {"name": "metropolis-min-degree", "file": "topologies/mixing.py",
     "old": "np.maximum(deg[rows], deg[cols])", "new": "np.minimum(deg[rows], deg[cols])",
     "tests": ["tests/test_topologies.py", "tests/test_topology_measures.py"],
     "why": "Metropolis weights use 1/(1 + min degree): hubs over-weighted, diagonals may go negative"},
    {"name": "hypercube-missing-dimension", "file": "topologies/hypercube.py",
     "old": "range(n.bit_length() - 1)", "new": "range(n.bit_length() - 2)",
     "tests": ["tests/test_topology_families.py"],
     "why": "the hypercube builder leaves out its highest dimension's links (the graph splits in two)"},
    {"name": "shard-one-short", "file": "p2pfl/data/partitions/shard.py",
     "old": "order[i * s:(i + 1) * s]", "new": "order[i * s:(i + 1) * s - 1]",
     "tests": ["tests/test_partitions.py"],
     "why": "the shard partition deals each peer s − 1 shards (off by one: samples left out)"},
]


def _ignore(top: Path):  # noqa: ANN202 - shutil.copytree's ignore callable
    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = SKIP_ANYWHERE | (SKIP_TOP if Path(folder) == top else frozenset())
        return {n for n in names if n in skip}
    return ignore


def apply(tree: Path, mutant: Mutant) -> None:
    """Replace the mutant's `old` text, which must occur exactly once in its file under `tree`."""
    path = tree / mutant["file"]
    text = path.read_text()
    count = text.count(mutant["old"])
    if count != 1:
        raise SystemExit(f"mutants: {mutant['name']}: its old text occurs {count} times in {mutant['file']}, not once")
    path.write_text(text.replace(mutant["old"], mutant["new"]))


def first_failure(output: str) -> str:
    """The first FAILED or ERROR test id of pytest's short summary ('' when there is none)."""
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return found.group(1) if found else ""


def run(tree: Path, mutant: Mutant) -> tuple[str, float, str]:
    """Copy `tree`, apply the mutant and run its tests: (verdict, seconds, first failing test id)."""
    python = tree / ".venv" / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix=f"p2pfl-mutant-{mutant['name']}-") as tmp:
        copy = Path(tmp) / "tree"
        shutil.copytree(tree, copy, ignore=_ignore(tree), symlinks=True)
        apply(copy, mutant)
        for test in mutant["tests"]:
            if not (copy / test.split("::")[0]).is_file():
                raise SystemExit(f"mutants: {mutant['name']}: no test file {test.split('::')[0]}")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "P2PFL_DATA": str(tree / "data-cache"), "PYTHONPATH": str(copy)}
        where = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('p2pfl').origin)"],
                               cwd=copy, env=env, capture_output=True, text=True, check=True).stdout.strip()
        if not Path(where).resolve().is_relative_to(copy.resolve()):
            raise SystemExit(f"mutants: the copy imports p2pfl from {where}, not from {copy}")
        command = [str(python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutant["tests"]]
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # pytest and whatever it started (mpirun jobs)
            proc.communicate()
            return f"caught (timeout after {TIMEOUT_S} s)", time.monotonic() - start, ""
        seconds = time.monotonic() - start
    if proc.returncode in (1, 2):
        return "caught", seconds, first_failure(output)
    what = "all passed" if proc.returncode == 0 else f"pytest exit {proc.returncode}"
    return f"MISSED ({what})", seconds, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the tree to mutate (default: this repository)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="print the mutants without running them")
    args = parser.parse_args(argv)
    names = [m["name"] for m in MUTANTS]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(names)}")
    chosen = [m for m in MUTANTS if not args.only or m["name"] in args.only]
    if args.list:
        for m in chosen:
            print(f"{m['name']:30} {m['file']}\n{'':30} {m['why']}\n{'':30} tests: {' '.join(m['tests'])}")
        return 0
    tree = args.tree.resolve()
    caught = 0
    for m in chosen:
        verdict, seconds, failed = run(tree, m)
        caught += verdict.startswith("caught")
        print(f"{m['name']:30} {verdict:24} {seconds:7.1f} s  {failed}".rstrip(), flush=True)
    print(f"{caught} of {len(chosen)} mutants caught")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
