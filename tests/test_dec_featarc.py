"""FeatARC, decentralised: the alignment regulariser, the cluster assignment, the per-cluster mix along the graph,
the same numbers on 1 and 4 ranks, and exact checkpoint resume of the cluster copies."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.losses.featarc import alignment_regulariser, alignment_scores, assign_cluster
from p2pfl.run import main
from p2pfl.runtime.checkpoint import load_peer, record_state, restore_record, save_peer

from conftest import four_ranks_equal_one, timing_free_records
from helpers_inproc import setup_algorithm

# ---------------------------------------------------------------------------------------------- the regulariser

def _direct_regulariser(z1: torch.Tensor, z2: torch.Tensor, anchor: torch.Tensor) -> float:
    """−½ (mean cos(z1, F) + mean cos(z2, F)) written out in float64, row by row."""
    def cos(a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.double(), b.double()
        return float((a * b).sum() / (a.norm() * b.norm()))
    b = z1.shape[0]
    m1 = sum(cos(z1[i], anchor[i]) for i in range(b)) / b
    m2 = sum(cos(z2[i], anchor[i]) for i in range(b)) / b
    return -0.5 * (m1 + m2)


def test_regulariser_matches_direct_float64_and_never_moves_the_anchor() -> None:
    gen = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(7, 5, generator=gen), torch.randn(7, 5, generator=gen) * 3
    anchor = torch.randn(7, 5, generator=gen).requires_grad_(True)
    z1.requires_grad_(True)
    value = alignment_regulariser(z1, z2, anchor)
    assert float(value.detach()) == pytest.approx(_direct_regulariser(z1.detach(), z2, anchor.detach()), abs=1e-6)
    value.backward()
    assert anchor.grad is None and z1.grad is not None
    # at its optimum both views point along the anchor: −1
    assert float(alignment_regulariser(anchor.detach() * 2, anchor.detach() * 0.5, anchor)) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="projection width"):
        alignment_regulariser(z1, z2, torch.randn(7, 6))


# ---------------------------------------------------------------------------------------------- the assignment

def test_assignment_picks_the_cluster_whose_linear_encoder_the_peer_perturbs() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 6, generator=gen)
    w = [torch.randn(4, 6, generator=gen) for _ in range(3)]

    def feats(m: torch.Tensor) -> torch.Tensor:
        return F.normalize(x @ m.t(), dim=1)

    for k in range(3):
        own = w[k] + 1e-2 * torch.randn(4, 6, generator=gen)
        scores = alignment_scores(feats(own), [feats(m) for m in w])
        # in float64 from the images and the maps, cosines written out
        h_own = x.double() @ own.double().t()
        direct = [sum(float(h_own[n] @ h[n] / (h_own[n].norm() * h[n].norm())) for n in range(64)) / 64
                  for h in (x.double() @ m.double().t() for m in w)]
        assert scores == pytest.approx(direct, abs=1e-6)
        assert assign_cluster(scores) == k
        assert scores[k] > 0.99


def test_assignment_ties_go_to_the_lowest_cluster_and_nan_never_wins() -> None:
    assert assign_cluster([0.5, 0.5]) == 0
    assert assign_cluster([0.2, 0.7, 0.7]) == 1
    assert assign_cluster([float("nan"), 0.1, 0.3]) == 2
    assert assign_cluster([0.1, float("nan"), -0.3]) == 0
    x = torch.randn(10, 3)
    same = F.normalize(x, dim=1)
    assert assign_cluster(alignment_scores(same, [same, same.clone()])) == 0


def test_a_peer_moves_to_the_cluster_its_trained_features_match(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-featarc", clusters=3)
    peer = algo.peers[0]
    assert [algo.peers[p].cluster for p in range(4)] == [0, 1, 2, 0]  # i mod C before any training
    assert peer.own_features.shape[0] == 0
    assert algo.assign(peer)["cluster"] == 0  # not trained yet: keeps its initial cluster
    peer.own_features = algo.unit_features(peer.copies[2], peer)
    metrics = algo.assign(peer)
    assert peer.cluster == 2 and metrics["alignment"] == pytest.approx(1.0, abs=1e-5)
    model, copy = peer.model.state_dict(), peer.copies[2].state_dict()
    assert all(torch.equal(model[n], copy[n]) for n in model)  # it trains its copy of cluster 2
    # the three initial cluster models differ from each other
    first = [next(c.parameters()) for c in peer.copies]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])


# ---------------------------------------------------------------------------------------------- the mix

def _fill(module: nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(module.parameters()) + [b for b in module.buffers() if b.is_floating_point()]:
            t.copy_(torch.rand(t.shape, generator=gen) + 0.5)


@pytest.mark.parametrize("topology,poisoned", [("star", None), ("cycle", None), ("cycle", 1)])
def test_each_cluster_mixes_its_members_and_empty_clusters_are_kept(tmp_path: Path, topology: str,
                                                                     poisoned: int | None) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-featarc", peers=5, topology=topology, clusters=3)
    clusters = [0, 0, 1, 0, 1]  # nobody in cluster 2
    models, copies = {}, {}
    for p, peer in algo.peers.items():
        peer.cluster = clusters[p]
        _fill(peer.model, 100 + p)
        models[p] = peer.mixable.flatten().double()
        for k, c in enumerate(peer.copies):
            _fill(c, 1000 + 10 * p + k)
        copies[p] = [m.flatten().double() for m in peer.copy_mixable]
    net = algo.ctx.schedule.at(1)
    if poisoned is not None:
        algo.ctx.checked.faults.poisoned.add(poisoned)
    phase = algo.communicate(1, net)
    if poisoned is not None:  # its links fail both ways; the weights are those of the graph without them
        lost = [(q, poisoned) for q in algo.ctx.graph.neighbors(poisoned)]
        assert sorted(phase.events.rejected) == sorted(lost)
        net = net.without(lost)
    for p, peer in algo.peers.items():
        row = net.row(p)
        if topology == "star" and poisoned is None:  # metropolis weights by hand: hub 0, four leaves
            assert row == ([(j, pytest.approx(0.2)) for j in range(5)] if p == 0
                           else [(0, pytest.approx(0.2)), (p, pytest.approx(0.8))])
        for k in range(3):
            members = [(j, w) for j, w in row if clusters[j] == k]
            got = peer.copy_mixable[k].flatten().double()
            if not members:
                assert torch.equal(got, copies[p][k]), (p, k)
                continue
            total = sum(w for _, w in members)
            expected = sum(w / total * models[j] for j, w in members)
            assert torch.allclose(got, expected, atol=1e-6), (p, k, members)
        own = peer.copy_mixable[peer.cluster].flatten()
        assert torch.equal(peer.mixable.flatten(), own)  # its model is now its copy of its cluster
    assert all(torch.equal(algo.peers[p].copy_mixable[2].flatten().double(), copies[p][2]) for p in range(5))


# ---------------------------------------------------------------------------------------------- runs

SHORT = ["-m", "p2pfl.run", "--algorithm", "dec-featarc", "--dataset", "synthetic", "--peers", "6", "--topology",
         "random", "--p", "0.6", "--rounds", "2", "--local-steps", "1", "--batch-size", "16", "--probe-epochs", "1",
         "--knn-k", "20", "--no-progress", "--no-plots", "--partition", "dirichlet", "--alpha", "0.5",
         "--batch-peers", "off"]  # compared bit for bit across layouts: peer by peer



@pytest.mark.mpi
def test_four_ranks_equal_one_rank_bit_for_bit(runs_dir: Path) -> None:
    four = four_ranks_equal_one(SHORT, runs_dir)
    final = [r for r in four if r["type"] == "eval"][-1]["metrics"]
    probes = [final[f"probe_acc_cluster{k}"] for k in range(2)]
    assert final["probe_acc_avg"] == max(probes)
    assert final["cluster_size0"] + final["cluster_size1"] == 6
    rounds = [r for r in four if r["type"] == "round" and r["round"] >= 1]
    assert all(len(r["cluster"]) == 6 for r in rounds) and "alignment" in rounds[-1]


def test_checkpoint_record_keeps_copies_cluster_and_features_exactly(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path / "a", algorithm="dec-featarc", clusters=3)
    peer = algo.peers[1]
    for k, c in enumerate(peer.copies):
        _fill(c, 7 + k)
    peer.cluster = 2
    peer.own_features = algo.unit_features(peer.copies[0], peer)
    save_peer(tmp_path, 1, 5, record_state(peer))
    fresh = setup_algorithm(tmp_path / "b", algorithm="dec-featarc", clusters=3)
    restore_record(fresh.peers[1], load_peer(tmp_path, 1, 5, torch.device("cpu")), torch.device("cpu"))
    back = fresh.peers[1]
    assert back.cluster == 2 and torch.equal(back.own_features, peer.own_features)
    for k in range(3):
        a, b = peer.copies[k].state_dict(), back.copies[k].state_dict()
        assert all(torch.equal(a[n], b[n]) for n in a)
        assert torch.equal(back.copy_mixable[k].flatten(), peer.copy_mixable[k].flatten())  # views still bound
        assert not any(p.requires_grad for p in back.copies[k].parameters())


def test_resume_equals_uninterrupted(runs_dir: Path) -> None:
    base = ["--algorithm", "dec-featarc", "--dataset", "synthetic", "--peers", "4", "--topology", "complete",
            "--partition", "dirichlet", "--alpha", "0.1", "--local-steps", "2", "--batch-size", "32",
            "--probe-epochs", "2", "--knn-k", "20", "--no-progress", "--no-plots", "--checkpoint-every", "1",
            "--batch-peers", "off", "--out", str(runs_dir)]
    assert main([*base, "--rounds", "3", "--name", "full"]) == 0
    assert main([*base, "--rounds", "2", "--name", "part"]) == 0
    assert main([*base, "--rounds", "3", "--resume", str(runs_dir / "part")]) == 0
    full, resumed = timing_free_records(runs_dir / "full"), timing_free_records(runs_dir / "part")
    rounds = [r for r in resumed if r["type"] == "round"]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    assert rounds == [r for r in full if r["type"] == "round"]
    assert resumed[-1] == full[-1] and full[-1]["type"] == "eval"  # the final evaluation: every cluster's scores
    final = full[-1]["metrics"]
    assert all(math.isfinite(final[f"probe_acc_cluster{k}"]) for k in range(2))
