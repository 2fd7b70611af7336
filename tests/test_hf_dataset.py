"""Hugging Face datasets saved with save_to_disk (--dataset hf:PATH, hf-table:PATH, hf-text:PATH), on datasets the
tests build with datasets.Dataset.from_dict: images, a table and texts read back equal to the source arrays (and to
an independent standardisation, one-hot encoding, resizing and character encoding), the test split against an
independent draw, malformed ones refused in one line, the configuration's refusals (the library missing among
them), and a fedavg run on an hf: image dataset on 1 and 2 ranks bit for bit.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from p2pfl.capabilities import FEATURES, TOKENS
from p2pfl.config import ConfigError, make_config
from p2pfl.data.datasets import DATASETS, load_dataset
from p2pfl.registry import options_of
from topologies.streams import SHARED, numpy_rng

from conftest import one_and_two_ranks_agree, timing_free_records

datasets = pytest.importorskip("datasets", reason="--dataset hf: needs the datasets package (pip install '.[hf]')")
pytestmark = pytest.mark.usefixtures("own_cache")  # the parsed datasets are cached in the test's own data root

ROOT = Path(__file__).resolve().parents[1]
SIDE = 8
NAMES = ["cat", "dog", "owl"]


def _images(n: int, shape: tuple[int, ...] = (SIDE, SIDE, 3), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n learnable uint8 images (class k brighter in its own band of rows) and their labels (3 classes), seeded."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 3)
    x = rng.integers(0, 96, (n, *shape), dtype=np.uint8)
    for k in range(3):
        x[y == k, 2 * k:2 * k + 3] += 150
    return x, y


def _image_set(x: np.ndarray, y: np.ndarray, image: str = "img") -> datasets.Dataset:
    features = datasets.Features({image: datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})
    return datasets.Dataset.from_dict({image: list(x), "label": y.tolist()}, features=features)


def _save(path: Path, **splits: datasets.Dataset) -> str:
    """Save the splits as a DatasetDict (one Dataset alone under the name 'only'), return its --dataset PATH."""
    (splits["only"] if "only" in splits else datasets.DatasetDict(splits)).save_to_disk(str(path))
    return str(path)


def _cfg(dataset: str, **options: object):
    return make_config(algorithm="fedavg", dataset=dataset, **options)


def _load(dataset: str, **options: object):
    return load_dataset(dataset, cfg=_cfg(dataset, **options))


def _refused(dataset: str, message: str, **options: object) -> None:
    """Loading `dataset` is refused in one line naming it and saying `message`."""
    with pytest.raises(ValueError) as e:
        load_dataset(dataset, cfg=_cfg(dataset, **options))
    text = str(e.value)
    assert text.startswith(f"--dataset {dataset}: ") and message in text and "\n" not in text, text


def _drawn(n: int, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """--test-split's rows drawn independently: (train rows, test rows), each in the file's order."""
    held = np.zeros(n, dtype=bool)
    held[numpy_rng(seed, SHARED, "test-split").permutation(n)[:round(fraction * n)]] = True
    return np.flatnonzero(~held), np.flatnonzero(held)


# ------------------------------------------------------------------ images

def test_images_are_read_back_equal(tmp_path: Path) -> None:
    x, y = _images(40)
    path = _save(tmp_path / "pets", train=_image_set(x[:30], y[:30]), test=_image_set(x[30:], y[30:]))
    ds = _load(f"hf:{path}", image_size=SIDE)
    assert np.array_equal(ds.x_train.numpy(), x[:30].transpose(0, 3, 1, 2))
    assert np.array_equal(ds.x_test.numpy(), x[30:].transpose(0, 3, 1, 2))
    assert np.array_equal(ds.y_train.numpy(), y[:30]) and np.array_equal(ds.y_test.numpy(), y[30:])
    assert ds.classes == tuple(NAMES) and ds.num_classes == 3 and not ds.features and not ds.tokens
    xf = x[:30].astype(np.float64) / 255
    assert np.allclose(ds.mean, xf.mean(axis=(0, 1, 2)), rtol=0, atol=1e-12)
    assert ds.extra["columns"] == {"image": "img", "label": "label"} and ds.extra["rows"] == {"train": 30, "test": 10}
    assert ds.extra["digest"].startswith("sha256:") and ds.extra["source"] == str((tmp_path / "pets").resolve())


def test_grey_arrays_of_any_size_resized_as_pillow_does_and_a_test_split(tmp_path: Path) -> None:
    """Images given as plain arrays (no Image feature, the column 'image', integer labels) of 12×12 grey pixels,
    resized to 8; one Dataset with --test-split."""
    x, y = _images(30, (12, 12))
    table = datasets.Dataset.from_dict({"image": x.tolist(), "label": y.tolist(), "note": ["n"] * 30})
    path = _save(tmp_path / "grey", only=table)
    ds = _load(f"hf:{path}", image_size=SIDE, test_split=0.2, split_seed=3)
    expected = np.stack([np.asarray(Image.fromarray(a, "L").resize((SIDE, SIDE), Image.Resampling.BILINEAR))
                         for a in x])[:, None]
    train, test = _drawn(30, 0.2, seed=3)
    assert np.array_equal(ds.x_train.numpy(), expected[train]) and np.array_equal(ds.x_test.numpy(), expected[test])
    assert np.array_equal(ds.y_train.numpy(), y[train]) and np.array_equal(ds.y_test.numpy(), y[test])
    assert ds.classes == ("0", "1", "2") and ds.channels == 1
    assert ds.extra["test_split"] == 0.2 and ds.extra["split_seed"] == 3 and ds.extra["image_size"] == SIDE


def test_float_images_in_channel_first_arrays(tmp_path: Path) -> None:
    x, y = _images(12)
    floats = x.transpose(0, 3, 1, 2).astype(np.float32) / 255  # C×H×W in [0, 1]
    table = datasets.Dataset.from_dict({"pixels": floats.tolist(), "y": y.tolist()})
    path = _save(tmp_path / "f", train=table, test=table)
    ds = _load(f"hf:{path}", image_size=SIDE, hf_image_column="pixels", hf_label_column="y")
    rounded = np.round(floats.astype(np.float64) * 255).astype(np.uint8)
    assert np.array_equal(ds.x_train.numpy(), rounded) and np.array_equal(rounded, x.transpose(0, 3, 1, 2))


# ------------------------------------------------------------------ tables

def _table(n: int = 50, seed: int = 1) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    return {"age": rng.integers(20, 80, n).tolist(), "weight": rng.normal(70, 9, n).round(2).tolist(),
            "smoker": rng.choice(["no", "yes", "former"], n).tolist(), "flag": rng.integers(0, 2, n).astype(bool)
            .tolist(), "outcome": rng.integers(0, 2, n).tolist()}


def _standardised(a: np.ndarray, train: np.ndarray) -> np.ndarray:
    return (a - a[train].mean()) / a[train].std()


def test_a_table_is_read_back_equal_to_an_independent_encoding(tmp_path: Path) -> None:
    columns = _table()
    features = datasets.Features({"age": datasets.Value("int32"), "weight": datasets.Value("float64"),
                                  "smoker": datasets.Value("string"), "flag": datasets.Value("bool"),
                                  "outcome": datasets.ClassLabel(names=["healthy", "ill"])})
    path = _save(tmp_path / "t", only=datasets.Dataset.from_dict(columns, features=features))
    ds = _load(f"hf-table:{path}", model="mlp", test_split=0.25)
    train, test = _drawn(50, 0.25)
    order = np.r_[train, test]
    smoker = np.array(columns["smoker"])
    cats = sorted(set(smoker[train]))
    expected = np.concatenate([
        _standardised(np.array(columns["age"], dtype=np.float64), train)[:, None],
        _standardised(np.array(columns["weight"]), train)[:, None],
        (smoker[:, None] == np.array(cats)[None]).astype(np.float64),
        _standardised(np.array(columns["flag"], dtype=np.float64), train)[:, None]], axis=1).astype(np.float32)[order]
    assert ds.features and np.array_equal(ds.x_train.numpy(), expected[:len(train)])
    assert np.array_equal(ds.x_test.numpy(), expected[len(train):])
    assert np.array_equal(ds.y_train.numpy(), np.array(columns["outcome"])[train])
    assert ds.classes == ("healthy", "ill") and ds.extra["categorical"] == {"smoker": cats}
    assert ds.extra["columns"] == {"label": "outcome", "features": ["age", "weight", "smoker", "flag"]}


def test_feature_columns_named_and_a_test_split_of_its_own(tmp_path: Path) -> None:
    columns = _table(40, seed=2)
    split = {k: v[:30] for k, v in columns.items()}, {k: v[30:] for k, v in columns.items()}
    path = _save(tmp_path / "t", train=datasets.Dataset.from_dict(split[0]), test=datasets.Dataset.from_dict(split[1]))
    ds = _load(f"hf-table:{path}", model="mlp", hf_label_column="outcome", hf_feature_columns="weight, age")
    weight, age = np.array(columns["weight"]), np.array(columns["age"], dtype=np.float64)
    train = np.arange(30)
    expected = np.stack([_standardised(weight, train), _standardised(age, train)], axis=1).astype(np.float32)
    assert np.array_equal(ds.x_train.numpy(), expected[:30]) and np.array_equal(ds.x_test.numpy(), expected[30:])
    assert ds.classes == ("0", "1") and ds.extra["numeric"]["age"] == [age[:30].mean(), age[:30].std()]


# ------------------------------------------------------------------ texts

def test_texts_are_read_back_equal_to_an_independent_encoding(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    letters = np.array(list("abcdefgh ."))
    texts = ["".join(rng.choice(letters, 9)) for _ in range(24)]
    texts[-1] = "zzzzzzzzz"  # test characters no training text has: the unknown token
    path = _save(tmp_path / "txt", train=datasets.Dataset.from_dict({"text": texts[:20]}),
                 test=datasets.Dataset.from_dict({"text": texts[20:]}))
    ds = _load(f"hf-text:{path}", model="char-lstm")
    chars = sorted(set("".join(texts[:20])))
    ids = {c: i for i, c in enumerate(chars)}
    encode = np.array([[ids.get(c, len(chars)) for c in t] for t in texts], dtype=np.int64)
    assert ds.tokens and np.array_equal(ds.x_train.numpy(), encode[:20]) and np.array_equal(ds.x_test.numpy(),
                                                                                           encode[20:])
    assert np.array_equal(ds.y_train.numpy(), encode[:20, -1]) and ds.classes == (*chars, "<unk>")
    assert ds.extra["unknown_test_characters"] == 9 and ds.extra["vocabulary"] == "".join(chars)


# ------------------------------------------------------------------ refusals

def test_malformed_datasets_refused_in_one_line(tmp_path: Path) -> None:
    x, y = _images(12)
    (tmp_path / "empty").mkdir()
    _refused(f"hf:{tmp_path / 'empty'}", "is not a dataset saved with save_to_disk", test_split=0.25)
    good = _save(tmp_path / "good", train=_image_set(x, y), test=_image_set(x, y))
    _refused(f"hf:{good}", "has no column 'photo' (--hf-image-column); its columns: img, label",
             hf_image_column="photo")
    _refused(f"hf:{good}", "has no column 'y' (--hf-label-column); its columns: img, label", hf_label_column="y")
    words = _save(tmp_path / "words", only=datasets.Dataset.from_dict({"img": list(x), "label": ["a"] * 12},
                                                                       features=datasets.Features(
                                                                           {"img": datasets.Image(),
                                                                            "label": datasets.Value("string")})))
    _refused(f"hf:{words}", "label column 'label' holds Value(string), not integers or a ClassLabel",
             test_split=0.25)
    grey, _ = _images(12, (SIDE, SIDE))
    mixed_rows = datasets.Dataset.from_dict({"img": [*list(x[:6]), *list(grey[6:])], "label": y.tolist()},
                                            features=datasets.Features({"img": datasets.Image(),
                                                                        "label": datasets.ClassLabel(names=NAMES)}))
    mixed = _save(tmp_path / "mixed", only=mixed_rows)
    _refused(f"hf:{mixed}", "column 'img' mixes channel counts: row 6 has 1, row 0 3", test_split=0.25)
    other = _save(tmp_path / "other", validation=_image_set(x, y))
    _refused(f"hf:{other}", "has no 'train' split (its splits: validation)", test_split=0.25)
    texts = _save(tmp_path / "texts", only=datasets.Dataset.from_dict({"text": ["abc", "abcd"] * 4}))
    _refused(f"hf-text:{texts}", "texts of column 'text' have 2 length(s) (3, 4 characters)", test_split=0.25,
             model="char-lstm")
    holes = _save(tmp_path / "holes",
                  only=datasets.Dataset.from_dict({"a": [1.0, None, 3.0, 4.0], "label": [0, 1] * 2}))
    _refused(f"hf-table:{holes}", "split 'train' row 1, column 'a': missing value", test_split=0.25, model="mlp")
    nested = _save(tmp_path / "nested", only=datasets.Dataset.from_dict({"a": [[1.0]] * 4, "label": [0, 1] * 2}))
    _refused(f"hf-table:{nested}", "feature column 'a' holds List, not numbers or strings", test_split=0.25,
             model="mlp")


def test_the_configuration_refuses_what_does_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _images(12)
    own = _save(tmp_path / "own", train=_image_set(x, y), test=_image_set(x, y))
    alone = _save(tmp_path / "alone", only=_image_set(x, y))
    with pytest.raises(ConfigError, match=r"^--test-split: hf:.* holds a test set of its own; leave --test-split"):
        _cfg(f"hf:{own}", test_split=0.2)
    with pytest.raises(ConfigError, match=r"^--test-split: hf:.* holds no test set \(a 'test' split\)"):
        _cfg(f"hf:{alone}")
    with pytest.raises(ConfigError, match=r"^--hf-text-column: --dataset hf:.* reads no such column \(its options: "
                                          r"--hf-image-column, --hf-label-column\)$"):
        _cfg(f"hf:{own}", hf_text_column="text")
    with pytest.raises(ConfigError, match=r"^--model: simple-cnn takes images; --dataset hf-table:.* gives feature "
                                          r"vectors: use mlp$"):
        make_config(algorithm="fedavg", dataset=f"hf-table:{own}", model="simple-cnn")
    with pytest.raises(ConfigError, match=r"^--model: char-lstm takes token ids; --dataset hf:.* gives none \(use "
                                          r"leaf:PATH or hf-text:PATH or sent140:PATH\)$"):
        make_config(algorithm="fedavg", dataset=f"hf:{own}", model="char-lstm")
    assert "hf-text" in DATASETS.capable(TOKENS) and "hf-table" in DATASETS.capable(FEATURES)
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"^--dataset: hf:PATH needs the datasets package: pip install "
                                          r"'p2pfl-sim\[hf\]'$"):
        _cfg(f"hf:{own}")
    with pytest.raises(ValueError, match=r"^--dataset hf:.*: needs the datasets package: pip install"):
        load_dataset(f"hf:{own}")


def test_without_the_library_a_run_exits_2_in_one_line(tmp_path: Path) -> None:
    x, y = _images(12)
    own = _save(tmp_path / "own", train=_image_set(x, y), test=_image_set(x, y))
    code = ("import sys; sys.modules['datasets'] = None; from p2pfl.run import main; "
            f"sys.exit(main(['--algorithm', 'fedavg', '--dataset', 'hf:{own}', '--out', '{tmp_path / 'runs'}']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "hf:PATH needs the datasets package: pip install 'p2pfl-sim[hf]'" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_its_options_and_the_own_files_options_reach_it_together(tmp_path: Path) -> None:
    cls = DATASETS.get("hf:/x")
    cfg = make_config(algorithm="fedavg", hf_image_column="photo", test_split=0.3, image_size=12)
    options = options_of(cls, cfg)
    assert (options.hf_image_column, options.test_split, options.image_size) == ("photo", 0.3, 12)
    assert options_of(cls, None).hf_label_column is None and options_of(DATASETS.get("npz:/x"), cfg).test_split == 0.3


# ------------------------------------------------------------------ runs

def test_an_hf_run_is_bit_for_bit_the_npz_run_of_the_same_arrays(tmp_path: Path) -> None:
    from p2pfl.simulation import simulate

    x, y = _images(64, (16, 16, 3))
    np.savez(tmp_path / "pets.npz", x_train=x[:48], y_train=y[:48], x_test=x[48:], y_test=y[48:])
    path = _save(tmp_path / "pets", train=_image_set(x[:48], y[:48]), test=_image_set(x[48:], y[48:]))
    small = dict(algorithm="fedavg", peers=4, rounds=2, local_steps=2, batch_size=8, eval_every=1, progress=False,
                 plots=False)
    npz = simulate(dataset=f"npz:{tmp_path / 'pets.npz'}", out=str(tmp_path / "a"), **small)
    hf = simulate(dataset=f"hf:{path}", image_size=16, out=str(tmp_path / "b"), **small)
    assert timing_free_records(hf.path) == timing_free_records(npz.path)
    assert hf.manifest["dataset"]["digest"] == npz.manifest["dataset"]["digest"]
    assert hf.manifest["dataset"]["mean"] == npz.manifest["dataset"]["mean"]


@pytest.mark.mpi
def test_an_hf_run_on_one_and_two_ranks_bit_for_bit(tmp_path: Path) -> None:
    x, y = _images(64, (16, 16, 3))
    path = _save(tmp_path / "pets", train=_image_set(x[:48], y[:48]), test=_image_set(x[48:], y[48:]))
    args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", f"hf:{path}", "--image-size", "16", "--peers",
            "4", "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every", "1", "--batch-peers",
            "off", "--no-progress", "--no-plots", "--out", str(tmp_path / "runs")]
    one, _ = one_and_two_ranks_agree(args, tmp_path / "runs")
    assert one["dataset"]["train"] == 48 and one["dataset"]["test"] == 16
    assert one["dataset"]["columns"] == {"image": "img", "label": "label"}
    assert one["partition"]["classes"] == NAMES
