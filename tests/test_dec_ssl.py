"""Dec-SSL end to end: FedBN mixing, a short run under mpirun -n 4, the same metrics on 1 and 4 ranks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import run_job, timing_free_records
from helpers_inproc import setup_algorithm


def _fill_distinct(models: dict[int, nn.Module]) -> dict[int, dict[str, torch.Tensor]]:
    before = {}
    for p, model in models.items():
        gen = torch.Generator().manual_seed(100 + p)
        with torch.no_grad():
            for t in list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]:
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
        before[p] = {k: v.clone() for k, v in model.state_dict().items()}
    return before


@pytest.mark.parametrize("fedbn", ["type", "off"])
def test_fedbn_never_mixes_batchnorm_and_mixes_everything_else(tmp_path: Path, fedbn: str) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-ssl", model="resnet-small", fedbn=fedbn, topology="cycle")
    before = _fill_distinct({p: peer.model for p, peer in algo.peers.items()})
    algo.communicate(1, algo.ctx.schedule.at(1, active=set(range(4))))
    bn_modules = (nn.BatchNorm1d, nn.BatchNorm2d)
    bn_names = {f"{m}.{t}" for m, mod in algo.peers[0].model.named_modules() if isinstance(mod, bn_modules)
                for t in ("weight", "bias", "running_mean", "running_var")}
    assert bn_names, "the model has BatchNorm layers"
    for p, model in ((p, peer.model) for p, peer in algo.peers.items()):
        state = model.state_dict()
        for name, value in state.items():
            if not value.is_floating_point():
                continue
            expected = sum(w * before[j][name] for j, w in algo.ctx.schedule.at(1).row(p))
            if fedbn == "type" and name in bn_names:
                assert torch.equal(value, before[p][name]), name
            else:
                assert torch.allclose(value, expected, atol=1e-6), name
                assert not torch.allclose(value, before[p][name]), name


SHORT = ["-m", "p2pfl.run", "--algorithm", "dec-ssl", "--dataset", "synthetic", "--peers", "8", "--topology",
         "random", "--p", "0.5", "--rounds", "2", "--local-steps", "2", "--batch-size", "32", "--probe-epochs", "2",
         "--knn-k", "20", "--no-progress", "--partition", "dirichlet", "--alpha", "0.5", "--eval-every", "1",
         "--batch-peers", "off"]  # compared bit for bit across layouts: peer by peer



@pytest.mark.mpi
def test_short_run_on_4_ranks_writes_everything_and_matches_1_rank(runs_dir: Path) -> None:
    for ranks, name in ((4, "four"), (0, "one")):
        proc = run_job([*SHORT, "--out", str(runs_dir), "--name", name] + (["--no-plots"] if ranks == 0 else []),
                       ranks=ranks, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
    four = runs_dir / "four"
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json"):
        assert (four / name).is_file(), name
    for plot in ("metrics.png", "consensus.png", "topology.png", "partition.png"):
        assert (four / "plots" / plot).is_file(), plot
    manifest = json.loads((four / "manifest.json").read_text())
    counts = manifest["partition"]["class_counts"]
    assert len(counts) == 8 and sum(map(sum, counts)) == manifest["dataset"]["train"]
    assert [h["peers"] for h in manifest["hosts"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    summary = json.loads((four / "summary.json").read_text())
    assert 0.0 <= summary["final"]["probe_acc_avg"] <= 1.0
    assert "probe_acc_peer_min" in summary["final"]
    # the untrained baseline, scored on the last rank, reaches the root's records
    assert 0.0 <= summary["final"]["probe_acc_untrained"] <= 1.0 and "knn_acc_untrained" in summary["final"]
    assert timing_free_records(four) == timing_free_records(runs_dir / "one")  # the same numbers, bit for bit


def test_neighbour_drift_equals_direct_layer_norm_sum(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-ssl", model="resnet-small", topology="star")
    ctx = algo.ctx
    _fill_distinct({p: peer.model for p, peer in algo.peers.items()})
    drift = algo.neighbour_drift(1, ctx.schedule.at(1))
    for p in range(4):
        expected = []
        for q in sorted(ctx.graph.neighbors(p)):
            pa, pb = dict(algo.peers[p].model.named_parameters()), dict(algo.peers[q].model.named_parameters())
            expected.append(sum(float((pa[n] - pb[n]).detach().double().norm()) for n in pa))
        assert drift[p] == pytest.approx(sum(expected) / len(expected), rel=1e-5)


def test_untrained_encoder_baseline_is_the_initialisations_score_computed_once(tmp_path: Path,
                                                                               monkeypatch) -> None:
    """Every evaluation reports the probe and kNN of the untrained encoder next to the network average's: the
    score of the common initialisation (an independent fresh model here), computed once and then reused."""
    from p2pfl.algorithms.scoring import representation_scores
    algo = setup_algorithm(tmp_path, algorithm="dec-ssl", probe_epochs=2, knn_k=10)
    algo.local_updates(sorted(algo.peers), 1, algo.ctx.schedule.at(1))
    fresh = algo.new_model().eval()
    expected = representation_scores(algo, fresh, None, final=True)
    built = []
    new_model = algo.new_model
    monkeypatch.setattr(algo, "new_model", lambda: built.append(1) or new_model())
    first, _ = algo.evaluate(1, final=False, net=algo.ctx.schedule.at(1))
    assert first["knn_acc_untrained"] == expected["knn_acc"] and "probe_acc_untrained" not in first
    final, _ = algo.evaluate(1, final=True, net=algo.ctx.schedule.at(1))
    assert final["probe_acc_untrained"] == expected["probe_acc"]
    assert final["knn_acc_untrained"] == expected["knn_acc"]
    again, _ = algo.evaluate(1, final=True, net=algo.ctx.schedule.at(1))
    assert again["probe_acc_untrained"] == expected["probe_acc"]
    # one model for each average plus one untrained model for kNN (first call) and one for the probe (second)
    assert len(built) == 3 + 2
    line = algo.summary_lines({"final": final})
    assert any(f"gain {100 * (final['probe_acc_avg'] - final['probe_acc_untrained']):+.1f} points" in x
               for x in line)


def test_dec_sl_trains_on_simclr_views_with_sl_augment_simclr(tmp_path: Path) -> None:
    """--sl-augment simclr: Dec-SL's input is one SimCLR view drawn from the peer's augmentation stream."""
    from p2pfl.seeding import torch_generator
    algo = setup_algorithm(tmp_path, algorithm="dec-sl", sl_augment="simclr")
    peer = algo.peers[1]
    x = peer.data.x[:8]
    got = algo.apply(x, algo.draw(peer, x))
    view = algo.simclr_augment()
    expected = view(x, torch_generator(algo.cfg.seed, 1, "augment", algo.ctx.device))
    assert torch.equal(got, expected)
    plain = setup_algorithm(tmp_path / "plain", algorithm="dec-sl")
    assert plain.augment is None and not torch.equal(plain.apply(x, plain.draw(plain.peers[1], x)), got)


def test_crop_scale_default_follows_image_size_and_the_option_wins(tmp_path: Path) -> None:
    from p2pfl.data import simclr_crop_scale
    assert simclr_crop_scale(None, 32) == 0.08 and simclr_crop_scale(None, 28) == 0.5
    algo = setup_algorithm(tmp_path, algorithm="dec-ssl")  # synthetic images are 32 px
    assert algo.augment.scale == (0.08, 1.0)
    algo = setup_algorithm(tmp_path / "set", algorithm="dec-ssl", crop_scale=0.3)
    assert algo.augment.scale == (0.3, 1.0)
