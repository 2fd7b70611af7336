"""Byzantine peers and robust aggregation: each attack and aggregator against its definition, and consensus
under sign-flip attackers: with the plain mean the honest peers are dragged as far as the attack likes, with
trimmed-mean and clipped-gossip (told the number of attackers) they stay within a bound whatever its scale."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from p2pfl.byzantine import Robust, aggregate, attack_vector, choose_byzantine
from p2pfl.byzantine.aggregators.clipped_gossip import adaptive_radius
from p2pfl.run import main

from golden_cases import normalise


def test_attacks_follow_their_definitions() -> None:
    x = torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    common = {"seed": 1, "peer": 3, "round": 2}
    assert torch.equal(attack_vector("sign-flip", x, scale=2.0, **common), -2.0 * x)
    assert torch.equal(attack_vector("zero", x, scale=1.0, **common), torch.zeros_like(x))
    first = x + 1
    assert torch.equal(attack_vector("stale", x, scale=1.0, first=first, **common), first)
    g1, g2 = (attack_vector("gaussian", x, scale=0.5, **common) for _ in range(2))
    assert torch.equal(g1, g2) and 0.3 < float((g1 - x).std()) < 0.7  # its own seeded stream, scale 0.5
    for omniscient in ("alie", "dissensus"):  # made on the receiver's side (tests/test_robust_topologies.py)
        with pytest.raises(ValueError, match="receiver's side"):
            attack_vector(omniscient, x, scale=1.0, **common)


def test_attackers_are_a_list_or_a_seeded_count() -> None:
    assert choose_byzantine("3,7", 10, 0) == {3, 7}
    drawn = choose_byzantine("2", 16, 5)
    assert len(drawn) == 2 and choose_byzantine("2", 16, 5) == drawn
    with pytest.raises(ValueError, match="--byzantine: peer 12 does not exist"):
        choose_byzantine("3,12", 10, 0)
    with pytest.raises(ValueError, match="leave no honest peer"):
        choose_byzantine("10", 10, 0)


def _neighbourhood(seed: int = 0, n: int = 6, d: int = 40) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    own = torch.randn(d, generator=gen, dtype=torch.float64)
    return own, {j: torch.randn(d, generator=gen, dtype=torch.float64) * (1 + j) for j in range(1, n)}


def test_trimmed_mean_and_median_against_a_brute_force() -> None:
    own, received = _neighbourhood()
    values = [own, *(received[j] for j in sorted(received))]
    for trim in (1, 2):
        out, cut = aggregate(Robust(frozenset(), aggregator="trimmed-mean", trim=trim), 0, own, received, [])
        for c in range(len(own)):
            column = sorted(float(v[c]) for v in values)
            assert float(out[c]) == pytest.approx(sum(column[trim:len(column) - trim]) / (len(column) - 2 * trim))
    out, _ = aggregate(Robust(frozenset(), aggregator="median"), 0, own, received, [])
    for c in range(len(own)):
        column = sorted(float(v[c]) for v in values)
        assert float(out[c]) == pytest.approx((column[2] + column[3]) / 2)  # 6 values: the middle two


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 11])
def test_trimmed_mean_median_and_cut_match_a_sort_at_every_size(n: int) -> None:
    """The selection by elementwise min/max equals a sort of each coordinate, and `cut` names exactly the
    neighbours whose value fell among the trimmed ones in more than half of the coordinates."""
    own, received = _neighbourhood(seed=n, n=n, d=301)
    received[n - 1] = received[n - 1] + 50.0  # one neighbour far above: trimmed nearly everywhere
    rows = torch.stack([own, *(received[j] for j in sorted(received))])
    ranks = rows.argsort(dim=0).argsort(dim=0)
    for trim in (1, 2, 3):
        out, cut = aggregate(Robust(frozenset(), aggregator="trimmed-mean", trim=trim), 0, own, received, [])
        if n < 2 * trim + 1:  # the trim the neighbourhood allows: the median
            assert torch.allclose(out, rows.sort(dim=0).values[(n - 1) // 2: n // 2 + 1].mean(0))
            continue
        assert torch.allclose(out, rows.sort(dim=0).values[trim:n - trim].mean(0))
        dropped = ((ranks < trim) | (ranks >= n - trim)).double().mean(dim=1)
        assert cut == [j for k, j in enumerate(sorted(received), start=1) if dropped[k] > 0.5]
        assert n - 1 in cut
    middle = rows.sort(dim=0).values[(n - 1) // 2: n // 2 + 1].mean(0)
    assert torch.allclose(aggregate(Robust(frozenset(), aggregator="median"), 0, own, received, [])[0], middle)


def test_clipped_gossip_bounds_each_neighbours_pull() -> None:
    own, received = _neighbourhood()
    row = [(0, 0.4), *((j, 0.12) for j in sorted(received))]
    mean, _ = aggregate(Robust(frozenset()), 0, own, received, row)
    wide, cut = aggregate(Robust(frozenset(), aggregator="clipped-gossip", options={"clip_radius": 1e9}), 0, own,
                          received, row)
    torch.testing.assert_close(wide, mean)  # nothing clipped: the gossip step itself
    assert cut == []
    tight, cut = aggregate(Robust(frozenset(), aggregator="clipped-gossip", options={"clip_radius": 0.5}), 0, own,
                           received, row)
    assert float((tight - own).norm()) <= 5 * 0.12 * 0.5 + 1e-12 and cut == [1, 2, 3, 4, 5]
    norms = {j: float((received[j] - own).norm()) for j in received}
    weights = {j: 0.12 for j in received}
    tau = adaptive_radius(norms, weights, trim=2)  # the two farthest (weight 0.24 = 2 x 0.12) are clipped
    assert tau == pytest.approx(sorted(norms.values())[-3])
    _, cut = aggregate(Robust(frozenset(), aggregator="clipped-gossip", trim=2), 0, own, received, row)
    assert cut == sorted(sorted(norms, key=norms.get)[-2:])


CONSENSUS = ["--algorithm", "consensus", "--peers", "16", "--topology", "random", "--p", "0.5", "--rounds", "40",
             "--vector-size", "1000", "--vector-dtype", "float64", "--byzantine", "2", "--attack", "sign-flip",
             "--trim", "2", "--eval-every", "0", "--no-progress", "--no-plots"]


def _honest_distance(tmp_path: Path, aggregator: str, scale: float) -> tuple[float, list]:
    name = f"{aggregator}-{scale}"
    assert main([*CONSENSUS, "--aggregator", aggregator, "--attack-scale", str(scale), "--out", str(tmp_path),
                 "--name", name]) == 0
    lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    final = lines[-1]
    assert set(final["per_peer"]).isdisjoint({str(p) for p in choose_byzantine("2", 16, 0)})  # attackers unscored
    cuts = [r["cut"] for r in lines if r["type"] == "round" and r["round"]]
    return final["metrics"]["distance_to_initial_mean_peer_max"], cuts


def test_robust_aggregators_keep_honest_peers_near_the_honest_average(tmp_path: Path) -> None:
    """Distance of the farthest honest peer to the honest peers' starting average, relative to its norm (the
    honest spread starts at about 3.7 on this scale). The mean follows the attack's scale; trimmed-mean and
    clipped-gossip with --trim 2 (the number of attackers) stay below 1.2 at scale 1 and 10 alike."""
    mean1, _ = _honest_distance(tmp_path, "mean", 1.0)
    mean10, _ = _honest_distance(tmp_path, "mean", 10.0)
    assert mean1 > 2.0 and mean10 > 8 * mean1
    for aggregator in ("trimmed-mean", "clipped-gossip"):
        for scale in (1.0, 10.0):
            distance, cut = _honest_distance(tmp_path, aggregator, scale)
            assert distance < 1.2, (aggregator, scale, distance)
            assert any(cut), aggregator  # the records name whom they cut


@pytest.mark.parametrize("attack", ["alie", "stale"])
def test_an_attackers_memory_is_checkpointed_so_the_resumed_run_is_exact(tmp_path: Path, attack: str) -> None:
    """Stale remembers its first message: a run resumed after round 3 equals an uninterrupted one bit for bit only
    if the checkpoint kept that memory. ALIE remembers nothing (it is made from the current round) and resumes
    exactly as well."""
    options = ["--algorithm", "fedavg", "--peers", "6", "--topology", "cycle", "--dataset", "synthetic",
               "--train-subset", "240", "--batch-size", "16", "--local-steps", "2", "--byzantine", "1", "--attack",
               attack, "--aggregator", "trimmed-mean", "--eval-every", "0", "--no-progress", "--no-plots",
               "--checkpoint-every", "1", "--out", str(tmp_path)]
    assert main([*options, "--rounds", "3", "--name", "cut"]) == 0
    assert main([*options, "--rounds", "6", "--resume", str(tmp_path / "cut")]) == 0
    assert main([*options, "--rounds", "6", "--name", "whole"]) == 0
    cut, whole = (normalise(tmp_path / name / "metrics.jsonl") for name in ("cut", "whole"))
    assert [r for r in cut if r["type"] == "round"] == [r for r in whole if r["type"] == "round"]
    assert cut[-1] == whole[-1]


def test_an_attack_plugins_own_option_reaches_what_it_sends(tmp_path: Path) -> None:
    """examples/plugins/attack.py flips each coordinate's sign with probability --flip-prob: at 1 it is the built-in
    sign-flip, so the run equals a sign-flip run bit for bit; at 0.5 the attackers send something else, so the run
    differs. Both only if the run's value of the plug-in's option reaches `Attack.send` (its default is 0.5)."""
    from conftest import ROOT, run_job

    common = ["--algorithm", "consensus", "--peers", "5", "--rounds", "3", "--vector-size", "64", "--eval-every",
              "0", "--topology", "complete", "--byzantine", "1", "--aggregator", "mean", "--attack-scale", "2",
              "--no-progress", "--no-plots", "--out", str(tmp_path)]
    plugin = ["--plugin", str(ROOT / "examples" / "plugins" / "attack.py"), "--attack", "random-sign"]
    for name, extra in {"built-in": ["--attack", "sign-flip"], "all": [*plugin, "--flip-prob", "1"],
                        "half": [*plugin, "--flip-prob", "0.5"]}.items():
        proc = run_job(["-m", "p2pfl.run", *common, *extra, "--name", name], ranks=0)
        assert proc.returncode == 0, proc.stderr[-3000:]
    built_in, every, half = (normalise(tmp_path / name / "metrics.jsonl") for name in ("built-in", "all", "half"))
    assert every == built_in and every[-1]["type"] == "eval"
    assert half[-1]["metrics"]["mean_shift"] != built_in[-1]["metrics"]["mean_shift"]
