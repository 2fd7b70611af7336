"""Text tasks (--dataset leaf:PATH, --model char-lstm and char-transformer, --partition natural), on files the
tests make: LEAF's JSON read back equal to an independent encoding, malformed files refused in one line naming
them, what takes no token sequences refused before training, the natural partition equal to the grouping by user
computed here (LEAF users and a csv column), fedavg on a generated Shakespeare-style set far below the unigram
baseline's perplexity with either model, and 1 vs 2 ranks bit for bit."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from p2pfl.config import ConfigError, make_config
from p2pfl.data.datasets import load_dataset
from p2pfl.data.partitions import PartitionError, partition
from topologies.streams import SHARED, numpy_rng

from conftest import one_and_two_ranks_agree

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("own_cache")  # the parsed files are cached in the test's own data root


def _generator():
    """scripts/leaf_text.py, the generated Shakespeare-style set docs/data.md trains on."""
    spec = importlib.util.spec_from_file_location("leaf_text", ROOT / "scripts" / "leaf_text.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaf(users: dict[str, tuple[list[str], list[str]]]) -> dict:
    return {"users": list(users), "num_samples": [len(y) for _, y in users.values()],
            "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _cfg(dataset: str, **options: object):
    return make_config(algorithm="fedavg", model="char-lstm", dataset=dataset, **options)


def _load(dataset: str, **options: object):
    return load_dataset(dataset, cfg=_cfg(dataset, **options))


# ------------------------------------------------------------------ read back

TRAIN_A = {"ann": (["to be", "or no"], ["!", "t"]), "bob": (["that ", "is th"], ["i", "e"])}
TRAIN_B = {"cy": (["quest", "ion: "], ["i", "w"])}
TEST = {"ann": (["hello"], ["?"]), "cy": (["be or"], [" "])}


def test_leaf_is_read_back_equal_to_an_independent_encoding(tmp_path: Path) -> None:
    root = tmp_path / "shakespeare"
    _write(root / "train" / "b.json", _leaf(TRAIN_B))  # read after a.json: files in sorted order
    _write(root / "train" / "a.json", _leaf(TRAIN_A))
    _write(root / "test" / "t.json", _leaf(TEST))
    ds = _load(f"leaf:{root}")
    train = [(u, x + y) for part in (TRAIN_A, TRAIN_B) for u, (xs, ys) in part.items() for x, y in zip(xs, ys)]
    test = [x + y for xs, ys in TEST.values() for x, y in zip(xs, ys)]
    chars = sorted(set("".join(t for _, t in train)))
    ids = {c: i for i, c in enumerate(chars)}
    unk = len(chars)
    x_train = np.array([[ids[c] for c in t] for _, t in train])
    x_test = np.array([[ids.get(c, unk) for c in t] for t in test])
    assert ds.tokens and ds.x_train.dtype.is_floating_point is False
    assert np.array_equal(ds.x_train.numpy(), x_train) and np.array_equal(ds.x_test.numpy(), x_test)
    assert np.array_equal(ds.y_train.numpy(), x_train[:, -1]) and np.array_equal(ds.y_test.numpy(), x_test[:, -1])
    assert ds.classes == (*chars, "<unk>") and ds.num_classes == len(chars) + 1
    assert ds.groups.tolist() == [0, 0, 1, 1, 2, 2] and ds.extra["users"] == ["ann", "bob", "cy"]
    assert ds.extra["unknown_test_characters"] == sum(c not in ids for t in test for c in t) > 0
    assert ds.extra["vocabulary"] == "".join(chars) and ds.extra["sequence_length"] == 6
    assert ds.channels == ds.num_classes and ds.image_size == 6


def test_one_leaf_file_with_a_test_split(tmp_path: Path) -> None:
    path = _write(tmp_path / "all.json", _leaf({**TRAIN_A, **TRAIN_B}))
    ds = _load(f"leaf:{path}", test_split=0.5, split_seed=3)
    held = np.zeros(6, dtype=bool)
    held[numpy_rng(3, SHARED, "test-split").permutation(6)[:3]] = True
    users = np.array([0, 0, 1, 1, 2, 2])
    assert ds.x_train.shape == (3, 6) and ds.x_test.shape == (3, 6)
    assert np.array_equal(np.unique(ds.groups.numpy(), return_inverse=True)[1],
                          np.unique(users[~held], return_inverse=True)[1])


def _refused(dataset: str, message: str, **options: object) -> None:
    with pytest.raises(ValueError) as info:
        _load(dataset, **options)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"--dataset {dataset}") and message in text, text


def test_malformed_leaf_refused_in_one_line(tmp_path: Path) -> None:
    def folder(name: str, train: object, test: object = None) -> str:
        _write(tmp_path / name / "train" / "d.json", train)
        if test is not False:
            _write(tmp_path / name / "test" / "d.json", _leaf(TEST) if test is None else test)
        return f"leaf:{tmp_path / name}"

    broken = tmp_path / "broken" / "train" / "d.json"
    folder("broken", {})
    broken.write_text("{not json")
    _refused(f"leaf:{tmp_path / 'broken'}", "d.json: is not readable JSON")
    _refused(folder("list", [1, 2]), "d.json: is not LEAF's JSON")
    _refused(folder("uneven", _leaf({"a": (["abc", "abd"], ["x"])})), "user 'a' has 2 x but 1 y")
    wrong = _leaf(TRAIN_A)
    wrong["num_samples"] = [2, 5]
    _refused(folder("count", wrong), "user 'bob' has 2 samples, 'num_samples' says 5")
    _refused(folder("femnist", _leaf({"w": ([[0.0] * 784], [3])})), "x must be a string and y one character")
    _refused(folder("long-y", _leaf({"a": (["abc"], ["xy"])})), "x must be a string and y one character")
    _refused(folder("lengths", _leaf({"a": (["abcde", "abc"], ["x", "y"])})), "samples have 2 different lengths")
    _refused(folder("no-test", _leaf(TRAIN_A), test=False), "has no test/ folder")
    (tmp_path / "empty" / "train").mkdir(parents=True)
    _refused(f"leaf:{tmp_path / 'empty'}", "train/ holds no .json file")
    single = _write(tmp_path / "one.json", _leaf(TRAIN_A))
    with pytest.raises(ConfigError, match=r"^--test-split: leaf:.*one\.json holds no test set"):
        _cfg(f"leaf:{single}")


def test_the_configuration_refuses_what_takes_no_token_sequences(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _write(root / "train" / "d.json", _leaf(TRAIN_A))
    _write(root / "test" / "d.json", _leaf(TEST))
    dataset = f"leaf:{root}"
    given = r"--dataset leaf:.*s gives token sequences$"
    with pytest.raises(ConfigError, match=r"^--algorithm: moon predicts no next token \(its paper defines it on "
                                          rf"image classification\); {given}"):
        make_config(algorithm="moon", model="char-lstm", dataset=dataset)
    for method in ("dec-ssl", "dec-sl", "fedmuscle"):
        with pytest.raises(ConfigError, match=rf"^--algorithm: {method} predicts no next token \("):
            make_config(algorithm=method, model="char-lstm", dataset=dataset)
    with pytest.raises(ConfigError, match=rf"^--model: mlp takes no token ids; {given[:-1]}: use char-lstm or "
                                          r"char-transformer$"):
        make_config(algorithm="fedavg", model="mlp", dataset=dataset)
    with pytest.raises(ConfigError, match=r"^--model: char-lstm takes token ids; --dataset synthetic gives none"):
        make_config(algorithm="fedavg", model="char-lstm", dataset="synthetic")
    with pytest.raises(ConfigError, match=r"^--rotate-groups: rotates images; "):
        _cfg(dataset, rotate_groups=2)
    with pytest.raises(ConfigError, match=r"^--lstm-layers: must lie in \[1, 2\]"):
        _cfg(dataset, lstm_layers=3)
    with pytest.raises(ConfigError, match=r"^--transformer-heads: must divide --transformer-dim 64, got 5$"):
        make_config(algorithm="fedavg", model="char-transformer", dataset=dataset, transformer_heads=5)
    for method in ("fedavg", "fedprox", "scaffold", "solo"):
        make_config(algorithm=method, model="char-lstm", dataset=dataset)


# ------------------------------------------------------------------ the natural partition

def _dealt(groups: np.ndarray, k: int, seed: int) -> list[set[int]]:
    """The users of each peer by the rule, computed here: users largest first (equal sizes in the order of a
    permutation from the partition stream), each to the peer with the fewest samples so far, the lowest on ties."""
    users = np.unique(groups)
    sizes = {int(u): int((groups == u).sum()) for u in users}
    shuffled = [int(u) for u in numpy_rng(seed, SHARED, "partition").permutation(users)]
    order = sorted(shuffled, key=lambda u: -sizes[u])  # sorted is stable
    totals, peers = [0] * k, [set() for _ in range(k)]
    for u in order:
        p = totals.index(min(totals))
        peers[p].add(u)
        totals[p] += sizes[u]
    return peers


@pytest.mark.parametrize("k", [6, 4, 3, 1])
def test_the_natural_partition_equals_the_grouping_by_user(k: int) -> None:
    rng = np.random.default_rng(0)
    groups = rng.permutation(np.repeat(np.arange(6), [40, 7, 19, 19, 3, 25]))
    labels = rng.integers(0, 5, groups.size)
    parts = partition(labels, k, "natural", seed=4, groups=groups)
    by_user = {int(u): set(np.flatnonzero(groups == u).tolist()) for u in np.unique(groups)}
    for part, users in zip(parts, _dealt(groups, k, 4)):
        assert part.tolist() == sorted(set().union(*(by_user[u] for u in users)))
    if k == 6:  # one user a peer: the peers' index sets are the users' own
        assert sorted(p.tolist() for p in parts) == sorted(sorted(s) for s in by_user.values())


def test_the_natural_partition_refuses_too_many_peers_and_data_without_users() -> None:
    groups = np.array([0, 0, 1, 2, 2, 2])
    with pytest.raises(PartitionError, match=r"^natural partition: 3 groups \(users\) of the data cannot fill 4 "
                                             r"peers \(each user whole\); use --peers 3 or fewer$"):
        partition(np.zeros(6, dtype=np.int64), 4, "natural", seed=0, groups=groups)
    with pytest.raises(PartitionError, match=r"^natural partition: the dataset gives no natural groups"):
        partition(np.zeros(6, dtype=np.int64), 2, "natural", seed=0)


# ------------------------------------------------------------------ runs

RUN = dict(algorithm="fedavg", peers=4, partition="natural", rounds=6, local_steps=20, batch_size=16, eval_every=6,
           progress=False, plots=False)
MODELS = {"char-lstm": dict(embed_dim=16, lstm_hidden=64, lr=0.5), "char-transformer": dict(lr=0.2)}


def unigram_perplexity(x_train: np.ndarray, x_test: np.ndarray, vocabulary: int) -> float:
    """The perplexity on the test sequences' predicted positions of the training targets' token frequencies
    (add-one smoothed, so that an unseen token has a probability)."""
    counts = np.bincount(x_train[:, 1:].ravel(), minlength=vocabulary) + 1.0
    log_p = np.log(counts / counts.sum())
    return math.exp(-log_p[x_test[:, 1:].ravel()].mean())


@pytest.mark.parametrize("model", MODELS)
def test_fedavg_perplexity_falls_far_below_the_unigram_baseline(tmp_path: Path, model: str) -> None:
    from p2pfl.simulation import simulate

    root = _generator().write(tmp_path / "shakespeare", users=6, length=20, seed=0)
    ds = _load(f"leaf:{root}")
    baseline = unigram_perplexity(ds.x_train.numpy(), ds.x_test.numpy(), ds.num_classes)
    run = simulate(dataset=f"leaf:{root}", model=model, out=str(tmp_path / "r"), **RUN, **MODELS[model])
    final = run.summary["final"]
    assert final["perplexity_avg"] <= 0.5 * baseline, (final["perplexity_avg"], baseline)
    assert final["token_acc_avg"] >= 0.4 and final["test_acc_avg"] >= 0.35, final
    assert final["perplexity_peer_max"] <= 0.5 * baseline, final
    part = run.manifest["partition"]
    assert sorted(u for g in part["groups"] for u in g) == list(range(6)) and part["kind"] == "natural"
    assert part["sizes"] == [sum(run.manifest["dataset"]["user_samples"][u] for u in g) for g in part["groups"]]
    why = run.manifest["batch_peers"]["ranks"][0]
    assert why["batched"] is False and f"{model} cannot run peer-stacked" in why["why"]


@pytest.mark.mpi
def test_a_leaf_run_on_one_and_two_ranks_bit_for_bit(tmp_path: Path) -> None:
    """Every rank reads the files itself; the records agree with one process's bit for bit."""
    root = _generator().write(tmp_path / "shakespeare", users=5, length=12, seed=1)
    args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--model", "char-lstm", "--embed-dim", "8",
            "--lstm-hidden", "16", "--dataset", f"leaf:{root}", "--partition", "natural", "--peers", "4",
            "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every", "1", "--no-progress",
            "--no-plots", "--out", str(tmp_path / "runs")]
    one_and_two_ranks_agree(args, tmp_path / "runs")


def test_a_csv_column_as_the_natural_groups(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n = 60
    hospital = rng.choice(["north", "east", "south", "west", "centre"], n)
    rows = [[f"{rng.normal():.3f}", hospital[i], f"{rng.normal():.3f}", int(rng.integers(0, 2))] for i in range(n)]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(",".join(map(str, r)) for r in [["a", "hospital", "b", "label"], *rows]) + "\n")
    dataset = f"csv:{path}"
    cfg = make_config(algorithm="fedavg", model="mlp", dataset=dataset, test_split=0.25, natural_column="hospital")
    ds = load_dataset(dataset, cfg=cfg)
    held = np.zeros(n, dtype=bool)
    held[numpy_rng(0, SHARED, "test-split").permutation(n)[:15]] = True
    names = list(dict.fromkeys(hospital[~held]))  # numbered in the order the training rows show them
    assert ds.x_train.shape == (45, 2) and ds.extra["natural_groups"] == names
    assert ds.groups.tolist() == [names.index(h) for h in hospital[~held]]
    parts = partition(ds.y_train, 5, "natural", seed=1, groups=ds.groups)
    assert sorted(p.tolist() for p in parts) == sorted(np.flatnonzero(ds.groups.numpy() == g).tolist()
                                                       for g in range(5))
    for column, message in (("ward", "has no column 'ward' (--natural-column); its columns: a, hospital, b, label"),
                            ("label", "column 'label' is the label column; --natural-column names another")):
        with pytest.raises(ValueError) as info:
            load_dataset(dataset, cfg=make_config(algorithm="fedavg", model="mlp", dataset=dataset,
                                                  test_split=0.25, natural_column=column))
        assert str(info.value) == f"--dataset {dataset}: {message}"
