"""The example optimiser plug-in (examples/plugins/optimiser.py, --gossip heavy-ball) against its definition written
here: D-PSGD on a local heavy-ball buffer, v⁺ = βv + g, X⁺ = W(X − ηV⁺), in the dense numpy row form of
tests/test_decentralised_optimisers.py (nothing of p2pfl.gossip), on the quadratic problem in float64; β = 0 is
--gossip average bit for bit; its option, its rule and its record."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_decentralised_optimisers import LR, SEED, D, K, _errors, _problem, _ring, _x_star

from p2pfl import plugins
from p2pfl.config import ConfigError, make_config
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.run import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "plugins" / "optimiser.py"
ROUNDS = 60


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    plugins.load([str(EXAMPLE)])


def heavy_ball(beta: float, W: np.ndarray, a: np.ndarray, b: np.ndarray, rounds: int) -> np.ndarray:
    """The definition's error trace (round 0 first): mean over peers and coordinates of (x_i − x*)²."""
    xs = _x_star(a, b)
    X, V = np.ones((len(a), D)), np.zeros((len(a), D))
    errors = [np.mean((X - xs) ** 2)]
    for _ in range(rounds):
        V = beta * V + a[:, None] * (a[:, None] * X - b)
        X = W @ (X - LR * V)
        errors.append(np.mean((X - xs) ** 2))
    return np.array(errors)


def _run(runs_dir: Path, name: str, *extra: str) -> Path:
    argv = ["--algorithm", "quadratic", "--peers", str(K), "--rounds", str(ROUNDS), "--dim", str(D), "--lr", str(LR),
            "--seed", str(SEED), "--topology", "cycle", "--eval-every", "0", "--out", str(runs_dir), "--name", name,
            "--no-progress", "--no-plots", *extra]
    assert main(argv) == 0
    return runs_dir / name


@pytest.mark.parametrize("beta", [0.5, 0.9])
def test_heavy_ball_follows_its_definition(tmp_path: Path, beta: float) -> None:
    a, b = _problem(1.0)
    want = heavy_ball(beta, _ring(K), a, b, ROUNDS)
    got = _errors(_run(tmp_path, "hb", "--gossip", "heavy-ball", "--heavy-ball-beta", str(beta)))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)
    plain = heavy_ball(0.0, _ring(K), a, b, ROUNDS)
    assert abs(got[-1] - plain[-1]) > 1e-6 * plain[-1]  # the momentum changed what ran
    manifest = json.loads((tmp_path / "hb" / "manifest.json").read_text())
    assert manifest["heavy_ball"] == {"beta": beta}


def test_beta_zero_is_average_bit_for_bit(tmp_path: Path) -> None:
    hb = _errors(_run(tmp_path, "hb", "--gossip", "heavy-ball", "--heavy-ball-beta", "0"))
    avg = _errors(_run(tmp_path, "avg", "--gossip", "average"))
    assert hb.tolist() == avg.tolist()


def test_its_option_and_rules() -> None:
    assert "heavy-ball" in SCHEMES.names()
    assert make_config(algorithm="quadratic", gossip="heavy-ball").heavy_ball_beta == 0.9
    for values, says in (({"heavy_ball_beta": 1.0}, "--heavy-ball-beta: must lie in [0, 1)"),
                         ({"gossip": "heavy-ball", "algorithm": "consensus"}, "--gossip: consensus mixes by"),
                         ({"gossip": "heavy-ball", "algorithm": "fedavg", "optimizer": "adam"}, "--optimizer: "),
                         ({"gossip": "heavy-ball", "byzantine": "1", "algorithm": "quadratic"},
                          "--gossip: heavy-ball mixes by the plain W-weighted mean")):
        with pytest.raises(ConfigError) as err:
            make_config(**values)
        assert str(err.value).startswith(says) and "\n" not in str(err.value), str(err.value)
