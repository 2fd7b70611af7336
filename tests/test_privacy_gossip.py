"""--gossip muffliato and --gossip decor (p2pfl.privacy): noise before gossip, and their privacy ledgers.

Muffliato's pairwise ledger against the exact divergence of each peer's view is tests/test_muffliato_ledger.py; the
(ε, δ) conversion equals a numeric minimisation over Rényi orders; Decor's pairwise noise sums to zero over the
network (float64, to rounding), so after a round the network average moved by the mean of the local noise alone,
redrawn here from its documented stream; its SecLDP accountant equals the closed form on the complete graph and the
local and central limits; the records and the ledgers' arrays are the same on 1 and 2 ranks bit for bit; runs
without the options carry none of their fields."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from test_privacy_f import metropolis

import p2pfl
from analysis.runs import Run
from p2pfl.privacy.decor import pair_noise, pairs, secldp_rho
from p2pfl.privacy.gaussian import epsilon_at
from p2pfl.seeding import pair_generator, torch_generator

from conftest import ROOT, run_job
from golden_cases import normalise
from helpers_inproc import setup_algorithm

DELTA = 1e-5


def _run(tmp_path: Path, **options) -> tuple[Run, Path]:
    run = p2pfl.simulate(plots=False, progress=False, out=str(tmp_path), **options)
    return run, Path(run.path)


@pytest.mark.parametrize("gossip", ["muffliato", "decor"])
def test_ledger_after_resume_replays_the_rounds_before(tmp_path: Path, gossip: str) -> None:
    """A ledger first asked for round 4 (a run resumed after round 3) replays rounds 1 to 3 from the schedule and
    ends equal, bit for bit, to one kept round by round (churn: the rounds' networks differ)."""
    options = dict(algorithm="consensus", peers=6, topology="random", p=0.6, churn=0.3, rounds=4, vector_size=10,
                   gossip=gossip)
    kept = setup_algorithm(tmp_path / "kept", **options).ctx
    for t in range(1, 5):
        first = kept.scheme.round_metrics(t, kept.schedule.at(t))
    resumed = setup_algorithm(tmp_path / "resumed", **options).ctx
    assert resumed.scheme.round_metrics(4, resumed.schedule.at(4)) == first
    assert all(np.array_equal(a, resumed.scheme.arrays()[name]) for name, a in kept.scheme.arrays().items())
    assert len({kept.schedule.at(t).digest for t in range(1, 5)}) > 1


@pytest.mark.parametrize("gossip", [["--gossip", "muffliato", "--muffliato-once"], ["--gossip", "decor"]])
def test_a_resumed_run_equals_the_uninterrupted_one(tmp_path: Path, gossip: list[str]) -> None:
    """2 rounds, then --resume to 4: the records (vectors' distances, the ledgers' totals) and the ledgers' arrays
    equal a 4-round run's; under --muffliato-once the peers' "noised" mark survives the checkpoint (noise added
    again in round 3 would move the vectors)."""
    from p2pfl.run import main

    args = ["--algorithm", "consensus", "--peers", "5", "--topology", "cycle", "--vector-size", "30",
            "--vector-dtype", "float64", "--eval-every", "0", "--checkpoint-every", "1", "--no-progress",
            "--no-plots", "--out", str(tmp_path), *gossip]
    assert main([*args, "--rounds", "2", "--name", "part"]) == 0
    assert main([*args, "--rounds", "4", "--resume", str(tmp_path / "part")]) == 0
    assert main([*args, "--rounds", "4", "--name", "whole"]) == 0

    def rounds(name: str) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in normalise(tmp_path / name / "metrics.jsonl")
                if r["type"] == "round"]

    assert [r["round"] for r in rounds("part")] == [0, 1, 2, 3, 4]
    assert rounds("part") == rounds("whole")
    arrays = sorted(p.name for p in (tmp_path / "whole").glob("*.npy"))
    assert len(arrays) == 1
    assert np.array_equal(np.load(tmp_path / "part" / arrays[0]), np.load(tmp_path / "whole" / arrays[0]))


def test_epsilon_conversion_is_the_best_renyi_order() -> None:
    """ρ + 2√(ρ log(1/δ)) equals min over α of α·ρ + log(1/δ)/(α − 1), found numerically here."""
    alphas = 1 + np.logspace(-4, 4, 400_001)
    for rho in (1e-4, 0.02, 0.5, 7.0):
        numeric = np.min(alphas * rho + math.log(1 / DELTA) / (alphas - 1))
        assert epsilon_at(rho, DELTA) == pytest.approx(numeric, rel=1e-6)


def test_pairwise_noise_cancels_over_the_network(tmp_path: Path) -> None:
    """On a random graph, every peer's pairwise noise (float64, d = 2000) sums to zero over the peers to rounding,
    while each peer's is of size σ_cor √(degree · d); both ends of a pair draw the same vector."""
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=9, topology="random", p=0.4, vector_size=10,
                           gossip="decor")
    net = algo.ctx.schedule.at(1)
    partners = pairs(net.adjacency, net.active)
    like = torch.zeros(2000, dtype=torch.float64)
    noise = {i: pair_noise(5, i, partners[i], 1, like, 2.0) for i in partners}
    total = torch.stack(list(noise.values())).sum(0)
    sizes = [float(noise[i].norm()) for i in partners]
    assert min(sizes) > 0.5 * 2.0 * math.sqrt(2000)
    assert float(total.abs().max()) < 1e-12
    a = torch.randn(50, generator=pair_generator(5, 2, 7, "decor/1"), dtype=torch.float64)
    b = torch.randn(50, generator=pair_generator(5, 7, 2, "decor/1"), dtype=torch.float64)
    c = torch.randn(50, generator=torch_generator(5, 2, "decor/1"), dtype=torch.float64)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_decor_moves_the_average_by_the_local_noise_only(tmp_path: Path) -> None:
    """One consensus round with Decor on a cycle (doubly stochastic W): the peers' vectors move by far more than
    the local noise, yet the network average moves by exactly the mean of the local noise ξ_i, redrawn here from
    the stream (seed, i, "decor/1"), to float64 rounding."""
    sigma, sigma_cor, k = 0.01, 3.0, 8
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=k, topology="cycle", vector_size=500,
                           vector_dtype="float64", gossip="decor", decor_noise=sigma_cor, decor_local_noise=sigma,
                           seed=4)
    before = torch.stack([algo.peers[p].x.clone() for p in range(k)])
    algo.communicate(1, algo.ctx.schedule.at(1))
    after = torch.stack([algo.peers[p].x for p in range(k)])
    local = torch.stack([torch.randn(500, generator=torch_generator(4, p, "decor/1"), dtype=torch.float64) * sigma
                         for p in range(k)])
    moved = after.mean(0) - before.mean(0)
    assert float((moved - local.mean(0)).abs().max()) < 1e-12
    assert float(local.mean(0).abs().max()) > 1e-4  # the local noise does move it
    W = metropolis(nx.cycle_graph(k))
    assert float((after - torch.from_numpy(W) @ before).abs().max()) > 1.0  # the pairwise noise is there


def test_secldp_accountant_closed_forms() -> None:
    """Σ = σ²I + σ_cor²(K I − J) on the complete graph has eigenvalues σ² (on 1) and σ² + Kσ_cor², so
    (Σ⁻¹)_ii = 1/(Kσ²) + (1 − 1/K)/(σ² + Kσ_cor²); σ_cor = 0 is local DP, a huge σ_cor central DP; honest peers
    only: a curious peer's pairs drop out (the complete graph on the others)."""
    k, sigma, sigma_cor, delta = 6, 0.2, 0.7, 0.3
    complete = np.ones((k, k)) - np.eye(k)
    inv = 1 / (k * sigma ** 2) + (1 - 1 / k) / (sigma ** 2 + k * sigma_cor ** 2)
    np.testing.assert_allclose(secldp_rho(complete, sigma, sigma_cor, delta), delta ** 2 / 2 * inv, rtol=1e-12)
    np.testing.assert_allclose(secldp_rho(complete, sigma, 0.0, delta), delta ** 2 / (2 * sigma ** 2), rtol=1e-12)
    cycle = nx.to_numpy_array(nx.cycle_graph(k))
    np.testing.assert_allclose(secldp_rho(cycle, sigma, 1e5, delta), delta ** 2 / (2 * k * sigma ** 2), rtol=1e-6)
    honest = secldp_rho(complete, sigma, sigma_cor, delta, honest=range(1, k))
    inv5 = 1 / ((k - 1) * sigma ** 2) + (1 - 1 / (k - 1)) / (sigma ** 2 + (k - 1) * sigma_cor ** 2)
    assert honest[0] == 0 and np.allclose(honest[1:], delta ** 2 / 2 * inv5, rtol=1e-12)


def test_decor_records_its_accountant(tmp_path: Path) -> None:
    """A 3-round run on a cycle records per peer ε of 3 rounds of Δ²/2·(Σ⁻¹)_ii, Σ built and inverted here."""
    k, sigma, sigma_cor, sensitivity = 6, 0.05, 0.4, 0.02
    run, folder = _run(tmp_path, algorithm="consensus", peers=k, topology="cycle", rounds=3, vector_size=20,
                       gossip="decor", decor_noise=sigma_cor, decor_local_noise=sigma, decor_sensitivity=sensitivity)
    A = nx.to_numpy_array(nx.cycle_graph(k))
    cov = sigma ** 2 * np.eye(k) + sigma_cor ** 2 * (np.diag(A.sum(1)) - A)
    rho = 3 * sensitivity ** 2 / 2 * np.diag(np.linalg.inv(cov))
    want = rho + 2 * np.sqrt(rho * math.log(1 / DELTA))
    np.testing.assert_allclose(np.load(folder / "decor_eps.npy"), want, rtol=1e-12)
    assert run.rounds[-1]["decor_eps_max"] == pytest.approx(want.max(), rel=1e-12)
    ldp = 3 * sensitivity ** 2 / (2 * sigma ** 2)
    assert run.summary["decor_ldp_eps"] == pytest.approx(ldp + 2 * math.sqrt(ldp * math.log(1 / DELTA)), rel=1e-12)
    assert run.summary["decor_eps_max"] < run.summary["decor_ldp_eps"]


def test_runs_without_the_options_record_none_of_it(tmp_path: Path) -> None:
    """--gossip average: no ledger fields in any record or the summary, and no ledger files."""
    run, folder = _run(tmp_path, algorithm="consensus", peers=4, rounds=2, vector_size=10)
    text = (folder / "metrics.jsonl").read_text() + (folder / "summary.json").read_text()
    assert "muffliato" not in text and "decor" not in text
    assert not list(folder.glob("*.npy"))


@pytest.mark.parametrize("args, message", [
    (["--gossip", "muffliato", "--muffliato-noise", "0"], "--muffliato-noise: must be > 0, got 0.0"),
    (["--gossip", "decor", "--decor-local-noise", "-1"], "--decor-local-noise: must be > 0"),
    (["--gossip", "muffliato", "--compress", "top-k"], "--compress"),
    (["--gossip", "decor", "--byzantine", "1"], "--gossip"),
])
def test_bad_input_is_one_line_before_training(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "4",
                           "--vector-size", "10", "--out", str(tmp_path), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not list(tmp_path.rglob("metrics.jsonl"))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    found = {}
    for ranks in (0, 2):  # 0: one plain process
        out = tmp_path_factory.mktemp("privacy") / f"r{ranks}"
        proc = run_job(["tests/mpi/privacy_runs.py", str(out)], ranks=ranks, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[ranks] = out
    return found


@pytest.mark.mpi
def test_same_noise_and_ledgers_on_1_and_2_ranks(outputs: dict[int, Path]) -> None:
    """The records (every round's vectors' consensus distance and losses, the ledgers' running totals) and the
    ledgers' arrays are equal bit for bit whether the peers sit on one rank or two; each run did add noise."""
    one = outputs[0]
    names = sorted(d.name for d in one.iterdir())
    assert len(names) == 6
    for name in names:
        assert normalise(outputs[2] / name / "metrics.jsonl") == normalise(one / name / "metrics.jsonl"), name
        for array in sorted((one / name).glob("*.npy")):
            assert np.array_equal(np.load(array), np.load(outputs[2] / name / array.name)), (name, array.name)
        summary = json.loads((one / name / "summary.json").read_text())
        assert summary.get("muffliato_eps_max", summary.get("decor_eps_max", 0)) > 0, name
