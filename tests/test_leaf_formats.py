"""LEAF's FEMNIST (--dataset femnist:PATH, images with their writers) and Sent140 (--dataset sent140:PATH, text
classification: capability SEQUENCE_LABELS), on files the tests write in LEAF's JSON layout: read back equal to the
source arrays and an independent encoding, malformed files refused in one line naming them (a file of another
LEAF format named with the dataset that reads it), the sequence-classification head reading the last position
holding a token, what cannot classify a sequence refused before training, fedavg far above the majority class on
generated learnable sets, and 1 vs 2 ranks bit for bit."""
from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pytest
import torch
from test_data_augment import crops  # MOON's crop and flip, image by image
from test_leaf import _leaf, _write  # LEAF's JSON layout, as Shakespeare's tests write it

from p2pfl.config import ConfigError, make_config
from p2pfl.data.datasets import load_dataset
from p2pfl.models import build_encoder
from topologies.streams import SHARED, numpy_rng

from conftest import one_and_two_ranks_agree

pytestmark = pytest.mark.usefixtures("own_cache")  # the parsed files are cached in the test's own data root


def _load(dataset: str, model: str = "simple-cnn", **options: object):
    return load_dataset(dataset, cfg=make_config(algorithm="fedavg", model=model, dataset=dataset, **options))


def _refused(dataset: str, message: str, model: str = "simple-cnn", **options: object) -> None:
    with pytest.raises(ValueError) as info:
        _load(dataset, model, **options)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"--dataset {dataset}: ") and message in text, text


# ------------------------------------------------------------------ FEMNIST

def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)


def _femnist_user(images: np.ndarray, labels: np.ndarray) -> tuple[list, list]:
    """A writer's samples as LEAF writes them: each image's pixels / 255, row by row, and its class."""
    return [(im.reshape(-1) / 255).tolist() for im in images], labels.tolist()


def test_femnist_is_read_back_equal_to_the_source_images(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sizes = {"f0002_41": 3, "f0001_07": 2, "f0100_12": 4}  # users in each file's order, files sorted by name
    images = {u: _images(rng, n) for u, n in sizes.items()}
    labels = {u: rng.integers(0, 62, n) for u, n in sizes.items()}
    root = tmp_path / "femnist"
    _write(root / "train" / "b.json", _leaf({u: _femnist_user(images[u], labels[u]) for u in ["f0100_12"]}))
    _write(root / "train" / "a.json", _leaf({u: _femnist_user(images[u], labels[u]) for u in ["f0002_41",
                                                                                               "f0001_07"]}))
    test_x, test_y = _images(rng, 3), np.array([61, 0, 35])
    _write(root / "test" / "t.json", _leaf({"f0002_41": _femnist_user(test_x, test_y)}))
    ds = _load(f"femnist:{root}")
    order = ["f0002_41", "f0001_07", "f0100_12"]
    x_train = np.concatenate([images[u] for u in order])[:, None]
    assert ds.x_train.dtype == torch.uint8 and np.array_equal(ds.x_train.numpy(), x_train)
    assert np.array_equal(ds.y_train.numpy(), np.concatenate([labels[u] for u in order]))
    assert np.array_equal(ds.x_test.numpy(), test_x[:, None]) and ds.y_test.tolist() == [61, 0, 35]
    assert ds.groups.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2] and ds.extra["users"] == order
    assert ds.extra["user_samples"] == [3, 2, 4]
    assert ds.num_classes == 62 and ds.classes[:3] == ("0", "1", "2") and ds.classes[10] == "A"
    assert ds.classes[36] == "a" and "".join(ds.classes) == string.digits + string.ascii_uppercase + \
        string.ascii_lowercase
    xf = x_train.astype(np.float64) / 255
    assert ds.mean == pytest.approx((xf.mean(),), abs=1e-12) and ds.std == pytest.approx((xf.std(ddof=1),))
    assert ds.extra["digest"].startswith("sha256:") and not ds.tokens and not ds.sequence_labels


def test_one_femnist_file_with_a_test_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    images, labels = _images(rng, 8), rng.integers(0, 62, 8)
    path = _write(tmp_path / "all.json", _leaf({"a": _femnist_user(images[:5], labels[:5]),
                                                "b": _femnist_user(images[5:], labels[5:])}))
    ds = _load(f"femnist:{path}", test_split=0.25, split_seed=2)
    held = np.zeros(8, dtype=bool)
    held[numpy_rng(2, SHARED, "test-split").permutation(8)[:2]] = True
    assert np.array_equal(ds.x_train.numpy()[:, 0], images[~held]) and np.array_equal(ds.x_test.numpy()[:, 0],
                                                                                      images[held])
    assert np.array_equal(ds.y_train.numpy(), labels[~held])
    users = np.array([0] * 5 + [1] * 3)[~held]
    assert ds.groups.tolist() == users.tolist() and ds.extra["test_split"] == 0.25


def test_malformed_femnist_refused_in_one_line(tmp_path: Path) -> None:
    good = (np.arange(784) / 783).tolist()

    def folder(name: str, x: object, y: object) -> str:
        _write(tmp_path / name / "train" / "d.json", _leaf({"w": ([good, x], [1, y])}))
        _write(tmp_path / name / "test" / "d.json", _leaf({"w": ([good], [2])}))
        return f"femnist:{tmp_path / name}"

    _refused(folder("short", good[:783], 3), "user 'w' sample 1: x must be a list of 784 numbers (a 28×28 image, "
                                             "FEMNIST's format), got a list of 783; its x is in none of LEAF's formats")
    _refused(folder("bright", [1.5] + good[1:], 3), "sample 1: pixel values must lie in [0, 1] (LEAF's v / 255), "
                                                    "got [0.00127714, 1.5]")
    _refused(folder("class", good, 62), "sample 1: y must be a class in [0, 62) (FEMNIST's 62), got 62")
    _refused(folder("text-class", good, "a"), "sample 1: y must be a class in [0, 62) (FEMNIST's 62), got 'a'")
    _refused(folder("string", "to be or not", 3), "sample 1: x must be a list of 784 numbers (a 28×28 image, "
                                                  "FEMNIST's format), got a str; it is in Shakespeare's format (x a "
                                                  "string): read it with --dataset leaf:PATH")
    _refused(folder("tweet", ["1", "Mon Apr 06", "NO_QUERY", "bob", "so happy"], 1),
             "it is in Sent140's format (x a tweet's record, its text last): read it with --dataset sent140:PATH")
    _refused(folder("none", {"pixels": good}, 1), "x must be a list of 784 numbers (a 28×28 image, FEMNIST's format), "
                                                  "got a dict; its x is in none of LEAF's formats")


# ------------------------------------------------------------------ Sent140

def _record(user: str, text: str) -> list[str]:
    """A tweet's record as LEAF's Sent140 writes it: id, date, query, user, text."""
    return ["1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", user, text]


TRAIN = {"ann": (["so happy today", "rain again :("], [1, 0]), "bob": (["meh", ""], [0, 1])}
TEST = {"cy": (["happy? Zebra", "sad and a long tweet"], [1, 0])}


def _tweets(users: dict[str, tuple[list[str], list[int]]]) -> dict:
    return _leaf({u: ([_record(u, t) for t in texts], ys) for u, (texts, ys) in users.items()})


def test_sent140_is_read_back_equal_to_an_independent_encoding(tmp_path: Path) -> None:
    root = tmp_path / "sent140"
    _write(root / "train" / "d.json", _tweets(TRAIN))
    _write(root / "test" / "d.json", _tweets(TEST))
    length = 12
    ds = _load(f"sent140:{root}", model="char-lstm", max_length=length)
    texts = [t[:length] for texts, _ in TRAIN.values() for t in texts]
    test = [t[:length] for texts, _ in TEST.values() for t in texts]
    chars = sorted(set("".join(texts)))
    unk, pad = len(chars), len(chars) + 1

    def encode(t: str) -> list[int]:
        return [chars.index(c) if c in chars else unk for c in t] + [pad] * (length - len(t))

    assert ds.sequence_labels and not ds.tokens and ds.x_train.dtype == torch.int64
    assert ds.x_train.tolist() == [encode(t) for t in texts] and ds.x_test.tolist() == [encode(t) for t in test]
    assert ds.y_train.tolist() == [1, 0, 0, 1] and ds.y_test.tolist() == [1, 0] and ds.num_classes == 2
    assert ds.vocabulary == (*chars, "<unk>", "<pad>") and ds.padding == pad == ds.channels - 1
    assert ds.image_size == length and ds.groups.tolist() == [0, 0, 1, 1] and ds.extra["users"] == ["ann", "bob"]
    assert ds.extra["cut_texts"] == sum(len(t) > length for xs, _ in (*TRAIN.values(), *TEST.values()) for t in xs)
    assert ds.extra["unknown_test_characters"] == sum(c not in chars for t in test for c in t) > 0
    assert ds.extra["vocabulary"] == "".join(chars) and ds.extra["max_length"] == length


def test_malformed_sent140_refused_in_one_line(tmp_path: Path) -> None:
    def folder(name: str, x: object, y: object) -> str:
        _write(tmp_path / name / "train" / "d.json", _leaf({"u": ([_record("u", "fine"), x], [0, y])}))
        _write(tmp_path / name / "test" / "d.json", _tweets(TEST))
        return f"sent140:{tmp_path / name}"

    _refused(folder("number", ["1", "date", 3], 1), "user 'u' sample 1: x must be a tweet's record, a list whose last "
                                                     "entry is its text (Sent140's format), got a list ending in int; "
                                                     "its x is in none of LEAF's formats", model="char-lstm")
    _refused(folder("empty", [], 1), "got an empty list", model="char-lstm")
    _refused(folder("negative", _record("u", "hi"), -1), "sample 1: y must be a class, an integer in [0, 100000) "
                                                         "(Sent140: 0 negative, 1 positive), got -1", model="char-lstm")
    _refused(folder("bool", _record("u", "hi"), True), "y must be a class, an integer in [0, 100000)",
             model="char-lstm")
    _refused(folder("pixels", [0.5] * 784, 1), "got a list ending in float; it is in FEMNIST's format (x 784 pixel "
                                               "values): read it with --dataset femnist:PATH", model="char-lstm")
    _refused(folder("string", "to be", 1), "got a str; it is in Shakespeare's format (x a string): read it with "
                                           "--dataset leaf:PATH", model="char-lstm")
    shakespeare = tmp_path / "shakespeare"
    _write(shakespeare / "train" / "d.json", _tweets(TRAIN))
    _write(shakespeare / "test" / "d.json", _tweets(TEST))
    _refused(f"leaf:{shakespeare}", "x must be a string and y one character (Shakespeare's format), got list and 1; "
                                    "it is in Sent140's format", model="char-lstm")
    with pytest.raises(ConfigError, match=r"^--max-length: must lie in \[2, 100000\]"):
        make_config(algorithm="fedavg", model="char-lstm", dataset=f"sent140:{shakespeare}", max_length=1)


@pytest.mark.parametrize("model", ["char-lstm", "char-transformer"])
def test_the_sequence_head_reads_the_last_position_holding_a_token(model: str) -> None:
    """Built with the padding id, the model's features of a padded sequence are its features per position on the
    sequence alone, at its last token: the padding after it is never read."""
    torch.manual_seed(0)
    pad, length = 9, 7
    per_position = build_encoder(model, 10, length).eval()
    classify = build_encoder(model, 10, length, padding=pad).eval()
    classify.load_state_dict(per_position.state_dict())
    texts = [[3, 1, 4, 1, 5], [2, 7, 1, 8, 2, 8, 1], [6], []]
    x = torch.tensor([t + [pad] * (length - len(t)) for t in texts])
    with torch.no_grad():
        out = classify(x)
        alone = [per_position(torch.tensor([t or [pad]]))[0, -1] for t in texts]
    assert out.shape == (4, classify.feat_dim)
    for row, want in zip(out, alone):
        torch.testing.assert_close(row, want, rtol=1e-5, atol=1e-6)


def test_the_configuration_refuses_what_cannot_classify_a_sequence(tmp_path: Path) -> None:
    from p2pfl.pretrain import PretrainError, image_dataset

    root = tmp_path / "s"
    _write(root / "train" / "d.json", _tweets(TRAIN))
    _write(root / "test" / "d.json", _tweets(TEST))
    dataset = f"sent140:{root}"
    given = r"--dataset sent140:.*s gives token sequences with one label each"
    for method, why in (("moon", "its paper defines it on image classification"),
                        ("dec-ssl", "its views are image augmentations: crops, colour jitter"),
                        ("fedmuscle", "its public data and its peers' tasks are images")):
        with pytest.raises(ConfigError, match=rf"^--algorithm: {method} classifies no sequence \({why}\); {given}$"):
            make_config(algorithm=method, model="char-lstm", dataset=dataset)
    with pytest.raises(ConfigError, match=rf"^--model: mlp classifies no token sequence; {given}: use char-lstm or "
                                          r"char-transformer$"):
        make_config(algorithm="fedavg", model="mlp", dataset=dataset)
    with pytest.raises(ConfigError, match=r"^--model: char-lstm takes token ids; --dataset femnist:.* gives none "
                                          r"\(use leaf:PATH or hf-text:PATH or sent140:PATH\)$"):
        make_config(algorithm="fedavg", model="char-lstm", dataset=f"femnist:{root}")
    with pytest.raises(PretrainError, match=r"^--dataset sent140:.*: gives token sequences, not images"):
        image_dataset(dataset)
    for method in ("fedavg", "fedprox", "scaffold", "solo"):
        make_config(algorithm=method, model="char-transformer", dataset=dataset)


# ------------------------------------------------------------------ runs on generated, learnable sets

def femnist_set(root: Path, users: int = 8, per_user: int = 40, classes: int = 5, seed: int = 0) -> Path:
    """Writers of dark blobs on white paper (LEAF's 1.0 background): class c a 8×6 block at its own place of a
    3-column grid, moved by up to a pixel, on noisy paper; a quarter as many test samples per writer."""
    rng = np.random.default_rng(seed)
    for part, n in (("train", per_user), ("test", per_user // 4)):
        data = {}
        for u in range(users):
            y = rng.integers(0, classes, n)
            img = np.full((n, 28, 28), 235.0) + rng.normal(0, 12, (n, 28, 28))
            for i, c in enumerate(y):
                r, col = 4 + 10 * (c // 3) + rng.integers(-1, 2), 4 + 8 * (c % 3) + rng.integers(-1, 2)
                img[i, r:r + 8, col:col + 6] = 30
            data[f"f{u:04d}"] = _femnist_user(np.clip(np.rint(img), 0, 255).astype(np.uint8), y)
        _write(root / part / "d.json", _leaf(data))
    return root


def sent140_set(root: Path, users: int = 8, per_user: int = 60, seed: int = 0) -> Path:
    """Tweets of 8 to 29 letters and spaces; positive (1) exactly when a '!' stands among the first 20 characters,
    drawn with probability 1/2; a third as many test tweets per user."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghij "))
    for part, n in (("train", per_user), ("test", per_user // 3)):
        data = {}
        for u in range(users):
            texts, labels = [], []
            for _ in range(n):
                t = list(rng.choice(letters, int(rng.integers(8, 30))))
                label = int(rng.integers(0, 2))
                if label:
                    t[int(rng.integers(0, min(len(t), 20)))] = "!"
                texts.append("".join(t))
                labels.append(label)
            data[f"user{u}"] = (texts, labels)
        _write(root / part / "d.json", _tweets(data))
    return root


RUN = dict(algorithm="fedavg", peers=4, partition="natural", batch_size=16, progress=False, plots=False)


def _majority(y_test: torch.Tensor) -> float:
    return float(np.bincount(y_test.numpy()).max() / len(y_test))


def test_fedavg_learns_femnist_far_above_the_majority_class(tmp_path: Path) -> None:
    from p2pfl.simulation import simulate

    root = femnist_set(tmp_path / "femnist")
    baseline = _majority(_load(f"femnist:{root}").y_test)
    run = simulate(dataset=f"femnist:{root}", model="simple-cnn", rounds=8, local_steps=15, lr=0.02, eval_every=8,
                   out=str(tmp_path / "r"), **RUN)
    final = run.summary["final"]
    assert final["test_acc_avg"] >= baseline + 0.4 and final["test_acc_avg"] >= 0.8, (final, baseline)
    part = run.manifest["partition"]
    assert sorted(u for g in part["groups"] for u in g) == list(range(8)) and part["kind"] == "natural"
    assert run.manifest["dataset"]["users"] == [f"f{u:04d}" for u in range(8)]


@pytest.mark.parametrize("algorithm, module", [("fedavg", "p2pfl.algorithms.fedavg"),
                                               ("dec-sl", "p2pfl.algorithms.supervised")])
@pytest.mark.parametrize("batch_peers", ["off", "on"])
def test_femnist_trains_on_unmirrored_crops_padded_with_white_paper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    algorithm: str, module: str,
                                                                    batch_peers: str) -> None:
    """Handwriting is never mirrored (a mirrored 'b' is a 'd') and the crop's padding is the paper's white, in a
    run's every training batch (peer by peer and peers stacked): each equals the crop alone, padded with 255, for
    the same draws, which would have mirrored some of the images; the manifest records it."""
    import importlib

    from p2pfl.data.augment import normalize
    from p2pfl.simulation import simulate

    methods = importlib.import_module(module)
    applied, seen = methods.supervised_apply, []

    def recorded(x: torch.Tensor, draws: dict, *args: object, **kwargs: object) -> torch.Tensor:
        out = applied(x, draws, *args, **kwargs)
        seen.append((x.cpu(), draws["u"].cpu(), out.detach().cpu()))
        return out

    monkeypatch.setattr(methods, "supervised_apply", recorded)
    root = femnist_set(tmp_path / "femnist", users=4, per_user=16)
    run = simulate(dataset=f"femnist:{root}", model="simple-cnn", algorithm=algorithm, peers=4, rounds=1,
                   local_steps=2, batch_size=8, batch_peers=batch_peers, eval_every=1, partition="natural",
                   out=str(tmp_path / "r"), progress=False, plots=False)
    assert run.manifest["dataset"]["augment"] == {"flip": False, "pad": 255}
    ds = _load(f"femnist:{root}")
    paper = normalize(torch.full((1, 1, 1, 1), 255, dtype=torch.uint8), ds.mean, ds.std)
    assert len(seen) == (2 if batch_peers == "on" else 8), len(seen)
    assert any(bool((u[:, 2] < 0.5).any()) for _, u, _ in seen)  # the photographs' recipe would mirror these
    for x, u, out in seen:
        assert torch.equal(out, normalize(crops(x, u, 4, 255, flip=False), ds.mean, ds.std))
        assert not torch.equal(out, normalize(crops(x, u, 4, 255, flip=True), ds.mean, ds.std))
        shifted = torch.floor(u[:, 0] * 9).long() < 4  # moved down: its top rows are padding
        assert bool(shifted.any()) and bool((out[shifted, :, 0] == paper).all())


@pytest.mark.parametrize("model, options", [("char-lstm", dict(embed_dim=16, lstm_hidden=64, lr=0.2, rounds=20)),
                                            ("char-transformer", dict(lr=0.1, rounds=8))])
def test_fedavg_classifies_sent140_far_above_the_majority_class(tmp_path: Path, model: str, options: dict) -> None:
    from p2pfl.simulation import simulate

    root = sent140_set(tmp_path / "sent140")
    baseline = _majority(_load(f"sent140:{root}", model=model, max_length=24).y_test)
    run = simulate(dataset=f"sent140:{root}", model=model, max_length=24, local_steps=20,
                   eval_every=options["rounds"], out=str(tmp_path / "r"), **RUN, **options)
    final = run.summary["final"]
    assert final["test_acc_avg"] >= max(0.9, baseline + 0.3), (final, baseline)
    assert final["test_acc_peer_min"] >= 0.8, final
    assert run.manifest["dataset"]["max_length"] == 24 and run.manifest["dataset"]["padding_token"] == "<pad>"


@pytest.mark.mpi
def test_a_sent140_run_on_one_and_two_ranks_bit_for_bit(tmp_path: Path) -> None:
    """Every rank reads the files itself; the records agree with one process's bit for bit."""
    root = sent140_set(tmp_path / "sent140", users=5, per_user=12, seed=1)
    args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--model", "char-lstm", "--embed-dim", "8",
            "--lstm-hidden", "16", "--dataset", f"sent140:{root}", "--max-length", "16", "--partition", "natural",
            "--peers", "4", "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every", "1",
            "--no-progress", "--no-plots", "--out", str(tmp_path / "runs")]
    one_and_two_ranks_agree(args, tmp_path / "runs")
