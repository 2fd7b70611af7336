"""python -m p2pfl.pretrain (issue 14): encoders pretrained here, loaded by the peers bit for bit (`init:` for
built-in models, `hf:FOLDER` with LoRA for Hugging Face ones), trained only on images the run never reads."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from p2pfl.fedmuscle.peerspec import PeerSpecError, load_peers_spec
from p2pfl.pretrain import build_hf_model, held_out_indices, main, parse, training_images

from conftest import run_job
from helpers_inproc import setup_algorithm
from test_peerspec import write_yaml

TINY_HF = "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64,patch_size=8"


def _pretrain(tmp_path: Path, out: str, *args: str) -> Path:
    target = tmp_path / out
    assert main(["--dataset", "synthetic", "--epochs", "1", "--batch-size", "32", "--train-subset", "128",
                 "--out", str(target), *args]) == 0
    return target


def _spec(tmp_path: Path, group: dict, count: int = 2) -> Path:
    return write_yaml(tmp_path / "spec.yaml", {"public": {"dataset": "synthetic", "size": 100}, "test_subset": 50,
                                               "groups": [{"count": count, "task": "synthetic", **group}]})


def _algo(tmp_path: Path, spec: Path, name: str, **options):
    return setup_algorithm(tmp_path / name, algorithm="fedmuscle", peers=2, topology="complete", dataset="synthetic",
                           peers_spec=str(spec), train_subset=200, local_steps=1, batch_size=16, rep_dim=16,
                           public_batch=8, **options)


def test_a_pretrained_checkpoint_is_what_every_peer_of_the_group_starts_from(tmp_path: Path) -> None:
    ckpt = _pretrain(tmp_path, "cnn.pt", "--model", "simple-cnn", "--objective", "simclr")
    saved = torch.load(ckpt, weights_only=True)
    assert saved["model"] == "simple-cnn" and saved["images"] == 128 and len(saved["epoch_losses"]) == 1
    pretrained = _algo(tmp_path, _spec(tmp_path, {"model": "simple-cnn", "init": str(ckpt)}), "init")
    fresh = _algo(tmp_path, write_yaml(tmp_path / "plain.yaml", {
        "public": {"dataset": "synthetic", "size": 100}, "test_subset": 50,
        "groups": [{"count": 2, "task": "synthetic", "model": "simple-cnn"}]}), "plain")
    for p in (0, 1):
        state = pretrained.peers[p].model.encoder.state_dict()
        assert state.keys() == saved["encoder"].keys()
        assert all(torch.equal(state[k], saved["encoder"][k]) for k in state)  # bit for bit
        for part in ("projection", "head"):  # the rest starts where it would have without init
            a, b = getattr(pretrained.peers[p].model, part), getattr(fresh.peers[p].model, part)
            assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
        assert not torch.equal(state["conv1.weight"], fresh.peers[p].model.encoder.state_dict()["conv1.weight"])
    manifest = pretrained.ctx.spec.manifest()
    assert manifest[0]["init"] == str(ckpt)


def _refused(capsys, build) -> str:
    """The one line a set-up that must fail before training prints (it exits with status 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        build()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_bad_init_is_one_line(tmp_path: Path, capsys) -> None:
    ckpt = _pretrain(tmp_path, "cnn.pt", "--model", "simple-cnn")
    err = _refused(capsys, lambda: _algo(tmp_path, _spec(tmp_path, {"model": "resnet-small", "init": str(ckpt)}),
                                         "wrong"))
    assert "made for simple-cnn on 3x32px images, the peers have resnet-small" in err
    with pytest.raises(PeerSpecError, match="init: file not found"):
        load_peers_spec(str(_spec(tmp_path, {"model": "simple-cnn", "init": "missing.pt"})))
    with pytest.raises(PeerSpecError, match="init is for built-in models"):
        load_peers_spec(str(_spec(tmp_path, {"model": "hf:" + str(tmp_path), "init": str(ckpt)})))
    junk = tmp_path / "junk.pt"
    torch.save({"weights": 1}, junk)
    err = _refused(capsys, lambda: _algo(tmp_path, _spec(tmp_path, {"model": "simple-cnn", "init": str(junk)}),
                                         "junk"))
    assert "not written by python -m p2pfl.pretrain" in err


HF_OPTIONS = {"hf-vit": TINY_HF, "hf-resnet": "embedding_size=8,hidden_sizes=[8,16],depths=[1,1]"}


@pytest.mark.parametrize("family", ["hf-vit", "hf-resnet"])
def test_a_pretrained_hf_folder_runs_with_lora_and_only_adapters_projection_and_heads_move(tmp_path: Path,
                                                                                          family: str) -> None:
    """Two Hugging Face families (a ViT; a ResNet, whose LoRA adapters sit on its convolutions)."""
    folder = _pretrain(tmp_path, family, "--model", family, "--hf-options", HF_OPTIONS[family])
    assert (folder / "config.json").is_file() and (folder / "pretrain.json").is_file()
    from transformers import AutoModel

    from p2pfl.pretrain import _hf_options
    trained = AutoModel.from_pretrained(folder, local_files_only=True).state_dict()
    untrained = build_hf_model(family, 3, 32, _hf_options(HF_OPTIONS[family]), 0).state_dict()
    assert any(not torch.equal(trained[k], untrained[k]) for k in trained)  # pretraining moved the weights
    algo = _algo(tmp_path, _spec(tmp_path, {"model": "hf:" + str(folder), "model_options": {"lora_rank": 4}}), "lora",
                 contrastive_steps=1, muscle_m=1)
    model = algo.peers[0].model
    backbone = {k.replace("base_model.model.", "").replace("base_layer.", ""): v
                for k, v in model.encoder.model.state_dict().items() if "lora_" not in k}
    assert all(torch.equal(backbone[k], trained[k]) for k in trained)  # the pretrained weights, as saved
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    algo.local_update(0, 1)
    algo.local_update(1, 1)
    algo.communicate(1, algo.ctx.schedule.at(1, active={0, 1}))
    moved = {n for n, p in model.named_parameters() if not torch.equal(start[n], p.detach())}
    assert moved and all("lora_" in n or n.startswith(("projection.", "head.")) for n in moved)
    assert any("lora_" in n for n in moved) and any(n.startswith("projection.") for n in moved)


def test_held_out_images_are_none_the_run_reads(tmp_path: Path) -> None:
    """--held-out-of: compared by the images themselves, nothing pretraining sees is a public image or any
    peer's training image of the run, and everything else of the training set is held out."""
    spec = write_yaml(tmp_path / "spec.yaml", {"public": {"dataset": "synthetic", "size": 150}, "groups": [
        {"count": 2, "model": "simple-cnn", "task": "synthetic"},
        {"count": 2, "model": "simple-cnn", "task": "synthetic", "labels": [0, 1, 2]}]})
    run = write_yaml(tmp_path / "run.yaml", {"algorithm": "fedmuscle", "peers_spec": str(spec), "dataset": "synthetic",
                                             "train_subset": 600, "seed": 4, "topology": "complete"})
    from p2pfl.data import load_dataset
    ds = load_dataset("synthetic")
    n = int(ds.x_train.shape[0])
    held = held_out_indices(n, str(run), "synthetic")
    algo = setup_algorithm(tmp_path / "run", **{k: v for k, v in yaml.safe_load(run.read_text()).items()},
                           peers=4, public_size=150)
    digest = lambda img: hashlib.sha1(img.contiguous().numpy().tobytes()).hexdigest()  # noqa: E731
    used = {digest(img) for peer in algo.peers.values() for img in peer.task.data.x.cpu()}
    used |= {digest(img) for imgs in algo.work.public.values() for img in imgs.cpu()}
    seen = {digest(img) for img in ds.x_train[torch.as_tensor(held)]}
    assert used and seen and not used & seen
    assert held.size + 150 + 600 == n  # all but the public set and the 600 the peers' pool draws from
    # --held-out-seeds: the images none of the runs with those seeds reads
    other = held_out_indices(n, str(run), "synthetic", seed=5)
    assert not np.array_equal(other, held)
    x, _, _ = training_images(parse(["--model", "simple-cnn", "--dataset", "synthetic", "--held-out-of", str(run),
                                     "--held-out-seeds", "4,5", "--out", str(tmp_path / "z")]))
    both = np.intersect1d(held, other)
    assert both.size < held.size and torch.equal(x, ds.x_train[torch.as_tensor(both)])


def test_cli_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    proc = run_job(["-m", "p2pfl.pretrain", "--model", "lenet", "--out", str(tmp_path / "x")], ranks=0)
    assert proc.returncode == 2 and "--model: unknown 'lenet'" in proc.stderr
    proc = run_job(["-m", "p2pfl.pretrain", "--model", "simple-cnn", "--dataset", "synthetic", "--held-out-of",
                    str(write_yaml(tmp_path / "r.yaml", {"algorithm": "dec-ssl"})), "--out", str(tmp_path / "y")],
                   ranks=0)
    assert proc.returncode == 2 and "the run has no peers_spec" in proc.stderr.strip().splitlines()[-1]


def test_pretraining_normalises_with_the_datasets_own_statistics() -> None:
    """The mean/std come from the dataset (a dataset's own, else its training images'), not from a table of
    names: a dataset p2pfl does not know gets its images' statistics, not 0.5/0.25; --channels converting to
    another count repeats the first channel's."""
    from p2pfl.data.datasets import Arrays, assemble
    from p2pfl.data.datasets.cifar10 import CIFAR10
    from p2pfl.pretrain import normalisation

    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.uint8).reshape(2, 3, 4, 4)
    unknown = assemble("unknown", Arrays(x, np.array([0, 1]), x, np.array([1, 0])))
    xf = x.double() / 255
    assert normalisation(unknown, 3) == (tuple(xf.mean(dim=(0, 2, 3)).tolist()), tuple(xf.std(dim=(0, 2, 3)).tolist()))
    cifar = assemble("cifar10", Arrays(x, np.array([0, 1]), x, np.array([1, 0]), mean=CIFAR10.mean, std=CIFAR10.std))
    assert normalisation(cifar, 3) == ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    assert normalisation(cifar, 1) == ((0.4914,), (0.2470,))


@pytest.mark.parametrize("table, gives", [("a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n", "feature vectors")])
def test_a_dataset_without_images_is_refused_in_one_line(table: str, gives: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.csv"
    path.write_text(table)
    assert main(["--dataset", f"csv:{path}", "--model", "simple-cnn", "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"p2pfl.pretrain: --dataset csv:{path}: gives {gives}, not images; p2pfl.pretrain trains image "
                   "encoders (train a model of such data in the run itself: python -m p2pfl.run --dataset ...)"]
    assert not (tmp_path / "x.pt").exists()
