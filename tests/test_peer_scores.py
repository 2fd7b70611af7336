"""--peer-scores every: each evaluation scores the peers' own models, not only the final one, with metrics that
evaluation scores the network average with (no final-only one). What a peer scores at round r equals what the final
evaluation of the same run stopped at r scores (the same models), on those metrics; and the option only observes:
the round records and the final evaluation are those of the default run."""
from __future__ import annotations

from pathlib import Path

import pytest

import p2pfl

from conftest import timing_free_records

OPTIONS = dict(algorithm="fedavg", dataset="synthetic", model="mlp", peers=4, topology="cycle", train_subset=128,
               batch_size=16, local_steps=2, eval_every=2, progress=False, plots=False, quiet=True)


def _evals(run: p2pfl.Run) -> list[dict]:
    return [r for r in timing_free_records(Path(run.path)) if r["type"] == "eval"]


@pytest.mark.parametrize("algorithm", ["fedavg", "dec-sl"])
def test_every_evaluation_scores_the_peers_as_a_run_ending_there_would(tmp_path: Path, algorithm: str) -> None:
    options = {**OPTIONS, "algorithm": algorithm}
    every = p2pfl.simulate(out=str(tmp_path / "every"), rounds=4, peer_scores="every", **options)
    default = p2pfl.simulate(out=str(tmp_path / "default"), rounds=4, **options)
    short = p2pfl.simulate(out=str(tmp_path / "short"), rounds=2, **options)
    evals = _evals(every)
    assert [e["round"] for e in evals] == [2, 4]
    assert all(set(e["per_peer"]) == {"0", "1", "2", "3"} for e in evals)
    assert "test_acc_peer_mean" in evals[0]["metrics"]
    at_two, ended = evals[0], _evals(short)[-1]
    scored = {k.removesuffix("_avg") for k in at_two["metrics"] if k.endswith("_avg") and k != "zeta2_avg"}
    for p, mine in at_two["per_peer"].items():  # the models after round 2, as the run that ended there scores them
        assert "test_acc" in mine and set(mine) <= scored | {"drift_to_avg", "drift_to_neighbours"}
        assert mine == {k: v for k, v in ended["per_peer"][p].items() if k in mine}
    assert at_two["metrics"] == {k: v for k, v in ended["metrics"].items() if k in at_two["metrics"]}
    assert _evals(default)[0]["per_peer"] == {}  # by default only the final evaluation scores them
    assert evals[-1] == _evals(default)[-1]
    rounds = [r for r in timing_free_records(Path(every.path)) if r["type"] == "round"]
    assert rounds == [r for r in timing_free_records(Path(default.path)) if r["type"] == "round"]


def test_peer_scores_takes_final_or_every_only() -> None:
    from p2pfl.config import ConfigError, make_config

    with pytest.raises(ConfigError, match="peer.scores"):
        make_config(peer_scores="sometimes")
