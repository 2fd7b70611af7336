"""Tabular data (--dataset csv:PATH, --model mlp), on files the tests make: the feature vectors read back equal to
an independent numpy computation of the standardisation and one-hot encoding, a malformed file refused in one line
naming it, the image-only methods and models refused before training, fedavg on 4 peers learning well above the
majority class (peer by peer and peer-stacked), and 1 vs 2 ranks bit for bit.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from p2pfl.config import ConfigError, make_config
from p2pfl.data.datasets import load_dataset
from topologies.streams import SHARED, numpy_rng

from conftest import one_and_two_ranks_agree

COLOURS = np.array(["blue", "green", "red"])
pytestmark = pytest.mark.usefixtures("own_cache")  # the parsed tables are cached in the test's own data root


def _table(n: int = 240, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A learnable problem: per class two Gaussian blobs in `features` dimensions (offset and scaled, so that the
    standardisation matters), a categorical column, and integer labels 0..2 written out of order (10, 2, 7)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centres = rng.normal(0.0, 2.5, (3, 2, features))
    x = centres[y, rng.integers(0, 2, n)] + rng.normal(0.0, 1.0, (n, features))
    x = x * np.arange(1, features + 1) + 100.0
    colour = COLOURS[(y + (rng.random(n) < 0.3)) % 3]
    return x, colour, y


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _blobs(path: Path, n: int = 240, seed: int = 0) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray]:
    x, colour, y = _table(n, seed=seed)
    labels = np.array([10, 2, 7])[y]
    rows = [[*map(repr, map(float, x[i])), colour[i], labels[i]] for i in range(n)]
    return _write(path, [f"f{j}" for j in range(x.shape[1])] + ["colour", "label"], rows), x, colour, labels


def _cfg(dataset: str, **options: object):
    return make_config(algorithm="fedavg", model="mlp", dataset=dataset, **options)


def _load(dataset: str, **options: object):
    return load_dataset(dataset, cfg=_cfg(dataset, **options))


# ------------------------------------------------------------------ read back

def test_csv_is_read_back_equal_to_an_independent_encoding(tmp_path: Path) -> None:
    path, x, colour, labels = _blobs(tmp_path / "t.csv")
    n = len(labels)
    colour[5] = "purple"  # one row whose category may reach the test rows only
    _write(path, [f"f{j}" for j in range(8)] + ["colour", "label"],
           [[*map(repr, map(float, x[i])), colour[i], labels[i]] for i in range(n)])
    ds = _load(f"csv:{path}", test_split=0.25, split_seed=3)
    held = np.zeros(n, dtype=bool)
    held[numpy_rng(3, SHARED, "test-split").permutation(n)[:round(0.25 * n)]] = True
    train, test = np.flatnonzero(~held), np.flatnonzero(held)
    mean = np.array([np.ascontiguousarray(x[train, j]).mean() for j in range(8)])
    std = np.array([np.ascontiguousarray(x[train, j]).std() for j in range(8)])
    cats = sorted(set(colour[train]))
    onehot = (colour[:, None] == np.array(cats)[None]).astype(np.float64)
    expected = np.concatenate([(x - mean) / std, onehot], axis=1).astype(np.float32)
    assert ds.features and ds.channels == 8 + len(cats) and ds.image_size == 1
    np.testing.assert_array_equal(ds.x_train.numpy(), expected[train])
    np.testing.assert_array_equal(ds.x_test.numpy(), expected[test])
    assert ds.classes == ("2", "7", "10") and ds.num_classes == 3  # integer labels sorted as integers
    np.testing.assert_array_equal(ds.y_train.numpy(), np.searchsorted([2, 7, 10], labels[train]))
    np.testing.assert_array_equal(ds.y_test.numpy(), np.searchsorted([2, 7, 10], labels[test]))
    assert ds.mean == (0.0,) * ds.channels and ds.std == (1.0,) * ds.channels  # already standardised
    extra = ds.extra
    assert extra["label_column"] == "label" and extra["features"] == ds.channels
    assert extra["numeric"] == {f"f{j}": [mean[j], std[j]] for j in range(8)}
    assert extra["categorical"] == {"colour": cats}
    unseen = int(sum(colour[i] not in cats for i in test))
    assert extra.get("unseen_categories", {}).get("colour", 0) == unseen
    assert extra["digest"].startswith("sha256:")


def test_labels_as_strings_a_label_column_and_imputation(tmp_path: Path) -> None:
    rows = [["a", "1.0", "x"], ["b", "", "y"], ["a", "3.0", ""], ["c", "5.0", "x"]]
    path = _write(tmp_path / "m.csv", ["kind", "v", "c"], rows)
    ds = _load(f"csv:{path}", label_column="kind", impute="mean", test_split=0.25, split_seed=0)
    x = np.concatenate([ds.x_train.numpy(), ds.x_test.numpy()])
    assert ds.classes == ("a", "b", "c") and x.shape[1] == 3
    held = np.zeros(4, dtype=bool)
    held[numpy_rng(0, SHARED, "test-split").permutation(4)[:1]] = True
    order = np.concatenate([np.flatnonzero(~held), np.flatnonzero(held)])
    v = np.array([1.0, np.nan, 3.0, 5.0])
    seen = v[~held & ~np.isnan(v)]
    expected_v = (np.where(np.isnan(v), seen.mean(), v) - seen.mean()) / seen.std()
    np.testing.assert_array_equal(x[:, 0], expected_v[order].astype(np.float32))
    assert x[np.flatnonzero(order == 2)[0], 1:].tolist() == [0.0, 0.0]  # a missing category: no entry


# ------------------------------------------------------------------ malformed files

def _refused(path: Path, message: str, **options: object) -> None:
    dataset = f"csv:{path}"
    with pytest.raises(ValueError) as e:
        _load(dataset, **{"test_split": 0.25, **options})
    text = str(e.value)
    assert text.startswith(f"--dataset {dataset}: ") and message in text and "\n" not in text, text


def test_malformed_csv_refused_in_one_line(tmp_path: Path) -> None:
    def table(name: str, header: list[str], rows: list[list[object]]) -> Path:
        return _write(tmp_path / name, header, rows)

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    _refused(empty, "is empty (a header row")
    _refused(table("header.csv", ["a", "label"], []), "holds a header but no rows")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b,label\n1,2,x\n3,y\n")
    _refused(ragged, "line 3 has 2 fields, the header 3")
    good = [[1.0, "u", "x"], [2.0, "v", "y"], [3.0, "u", "x"], [4.0, "v", "y"]]
    _refused(table("nolabel.csv", ["a", "b", "c"], good),
             "has no column 'label' (--label-column); its columns: a, b, c", label_column="label")
    mixed = [[1.0, "x"], [2.0, "y"], ["abc", "x"], [4.0, "y"]]
    _refused(table("mixed.csv", ["a", "label"], mixed), "column 'a' mixes numbers and text (line 4: 'abc')")
    gap = [[1.0, "x"], ["", "y"], [3.0, "x"], [4.0, "y"]]
    _refused(table("gap.csv", ["a", "label"], gap), "line 3, column 'a': missing value (fill it, or --impute mean)")
    _refused(table("nolab.csv", ["a", "label"], [[1.0, "x"], [2.0, "NA"], [3.0, "x"], [4.0, "y"]]),
             "line 3, column 'label': missing label")
    _refused(table("twice.csv", ["a", "a", "label"], [[1, 2, "x"], [3, 4, "y"]]), "names column(s) 'a' twice")
    _refused(table("alone.csv", ["label"], [["x"], ["y"], ["x"], ["y"]]),
             "holds no feature column besides the label column 'label'")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"a,label\n\xff\xfe,x\n")
    _refused(binary, "is not UTF-8 text")


def test_the_configuration_refuses_what_takes_no_feature_vectors(tmp_path: Path) -> None:
    path, *_ = _blobs(tmp_path / "t.csv", n=40)
    dataset = f"csv:{path}"
    with pytest.raises(ConfigError, match=r"^--algorithm: dec-ssl trains on images only \(its views are image "
                                          r"augmentations: crops, colour jitter\); --dataset csv:.*t\.csv gives "
                                          r"feature vectors$"):
        make_config(algorithm="dec-ssl", model="mlp", dataset=dataset, test_split=0.25)
    with pytest.raises(ConfigError, match=r"^--algorithm: moon trains on images only"):
        make_config(algorithm="moon", model="mlp", dataset=dataset, test_split=0.25)
    with pytest.raises(ConfigError, match=r"^--model: simple-cnn takes images; --dataset csv:.*t\.csv gives feature "
                                          r"vectors: use mlp$"):
        make_config(algorithm="fedavg", dataset=dataset, test_split=0.25)
    with pytest.raises(ConfigError, match=r"^--rotate-groups: rotates images; "):
        _cfg(dataset, test_split=0.25, rotate_groups=2)
    with pytest.raises(ConfigError, match=r"^--test-split: csv:.*t\.csv holds no test set"):
        _cfg(dataset)
    with pytest.raises(ConfigError, match=r"^--hidden: comma-separated widths >= 1"):
        _cfg(dataset, test_split=0.25, hidden="64,0")


# ------------------------------------------------------------------ runs

RUN = dict(algorithm="fedavg", model="mlp", hidden="32", peers=4, rounds=6, local_steps=10, batch_size=16,
           lr=0.05, partition="iid", eval_every=6, progress=False, plots=False)


@pytest.mark.parametrize("batch_peers", ["off", "on"])
def test_fedavg_learns_a_tabular_problem_well_above_the_majority_class(tmp_path: Path, batch_peers: str) -> None:
    from p2pfl.simulation import simulate

    path, _, _, labels = _blobs(tmp_path / "t.csv", n=400)
    run = simulate(dataset=f"csv:{path}", test_split=0.25, batch_peers=batch_peers, out=str(tmp_path / "r"), **RUN)
    majority = np.bincount(labels).max() / len(labels)
    acc = run.summary["final"]["test_acc_avg"]
    assert acc >= majority + 0.3, (acc, majority)
    assert run.manifest["dataset"]["features"] == 8 + 3 and run.manifest["partition"]["classes"] == ["2", "7", "10"]
    assert run.manifest["batch_peers"]["ranks"][0]["batched"] is (batch_peers == "on")


@pytest.mark.mpi
def test_a_csv_run_on_one_and_two_ranks_bit_for_bit(tmp_path: Path) -> None:
    """Every rank reads and encodes the file itself; the records agree with one process's bit for bit."""
    path, *_ = _blobs(tmp_path / "t.csv", n=160)
    args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--model", "mlp", "--hidden", "16", "--dataset",
            f"csv:{path}", "--test-split", "0.25", "--peers", "4", "--rounds", "2", "--local-steps", "2",
            "--batch-size", "8", "--eval-every", "1", "--batch-peers", "off", "--no-progress", "--no-plots", "--out",
            str(tmp_path / "runs")]
    one_and_two_ranks_agree(args, tmp_path / "runs")
