"""Guards of the decentralised optimisers on one-way graphs (SPEC §7): D² is refused where W is not symmetric (it
diverges there), gradient tracking and exact diffusion warn where one-way links fail (a biased fixed point). The
expectations come from the dense numpy implementation of tests/test_decentralised_optimisers.py, run on the
schedule's own W_t."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_decentralised_optimisers import LR, SEED, K, _dense, _problem

from conftest import run_job

ONE_WAY = ["--topology", "one-peer-exponential"]


def _weights(rounds: int, **network: float) -> list[np.ndarray]:
    """W_1 .. W_rounds of the quadratic problem's schedule on the one-peer exponential graph."""
    from p2pfl.config import make_config, resolve
    from p2pfl.network import NetworkOptions, NetworkSchedule
    from p2pfl.run import support_graph
    cfg = resolve(make_config(algorithm="quadratic", peers=K, topology="one-peer-exponential", seed=SEED,
                              rounds=rounds, **network), 1).cfg
    schedule = NetworkSchedule.from_options(NetworkOptions.of(cfg), support_graph(cfg, K))
    return [schedule.at(t).W.toarray() for t in range(1, rounds + 1)]


def _run(runs_dir: Path, name: str, *options: str, rounds: int = 3):
    return run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(K), "--rounds", str(rounds),
                    "--lr", str(LR), "--seed", str(SEED), "--eval-every", "0", "--out", str(runs_dir), "--name", name,
                    "--no-progress", "--no-plots", *options], ranks=0)


def test_d2_on_a_one_way_graph_is_refused(runs_dir: Path) -> None:
    """Its W is doubly stochastic with eigenvalues of real part >= 0 (the old guard let it pass), but not symmetric:
    D² grows without bound there (issue 39: error 0.98 -> 1.6e11 in 150 rounds at lr 0.05) while exact diffusion
    converges. The run is refused in one line naming exact diffusion, before anything is written."""
    W = _weights(150)
    assert all(np.allclose(w.sum(0), 1) and np.allclose(w.sum(1), 1) for w in W)
    assert min(np.linalg.eigvals(w).real.min() for w in W) >= -1e-12
    assert max(np.abs(w - w.T).max() for w in W) == pytest.approx(0.5)
    a, b = _problem(1.0)
    assert _dense("d2", lambda t: W[t - 1], a, b, 150)[-1] > 1e6
    assert _dense("exact-diffusion", lambda t: W[t - 1], a, b, 150)[-1] < 1e-6
    proc = _run(runs_dir, "d2", *ONE_WAY, "--gossip", "d2", rounds=150)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("p2pfl: error: --gossip d2: needs a symmetric W"), proc.stderr
    assert "exact-diffusion" in lines[0]
    assert not (runs_dir / "d2").exists()


def test_check_weights_refuses_asymmetric_weights_only_for_d2() -> None:
    from p2pfl.gossip.schemes import SCHEMES
    P = np.roll(np.eye(4), 1, axis=1)
    one_way = (np.eye(4) + P) / 2
    with pytest.raises(ValueError, match="symmetric"):
        SCHEMES.get("d2").check_weights([np.eye(4) / 2 + np.full((4, 4), 1 / 8), one_way])
    for scheme in ("exact-diffusion", "gradient-tracking", "average"):
        SCHEMES.get(scheme).check_weights([one_way])
    SCHEMES.get("d2").check_weights([(one_way + one_way.T) / 2])


@pytest.mark.parametrize("scheme", ["gradient-tracking", "exact-diffusion"])
def test_exact_schemes_on_failing_one_way_links_warn_of_their_bias(runs_dir: Path, scheme: str) -> None:
    """With one-way links failing (0.3), some W_t is only row-stochastic: the scheme stalls at a biased point far
    above where it reaches without failures. Rank 0 prints one warning line; without failures, none."""
    a, b = _problem(1.0)
    failing = _weights(400, link_failure=0.3)
    assert any(not np.allclose(w.sum(0), 1) for w in failing)
    biased = _dense(scheme, lambda t: failing[t - 1], a, b, 400)
    clean_w = _weights(400)
    exact = _dense(scheme, lambda t: clean_w[t - 1], a, b, 400)
    assert exact[-1] < 1e-12 < 1e-6 < biased[-1]
    warned = _run(runs_dir, "fail", *ONE_WAY, "--gossip", scheme, "--link-failure", "0.3")
    assert warned.returncode == 0, warned.stderr[-2000:]
    lines = [line for line in warned.stderr.splitlines() if line.startswith("p2pfl: warning:")]
    assert len(lines) == 1 and f"--gossip {scheme} on one-way links with failures" in lines[0], warned.stderr
    assert "biased" in lines[0]
    clean = _run(runs_dir, "clean", *ONE_WAY, "--gossip", scheme)
    assert clean.returncode == 0 and "p2pfl: warning:" not in clean.stderr, clean.stderr
