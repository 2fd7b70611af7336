"""Datasets from a researcher's own files (--dataset npz:PATH, folder:PATH), on files the tests make: each read back
equal to its source arrays (after the documented conversion), the test split against an independent draw, a
malformed file of each kind refused in one line naming the file, the prefix form of the registry, fedavg runs on
both through p2pfl.simulate with the dataset's digest and statistics in the manifest, and 1 vs 2 ranks bit for bit.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from p2pfl.config import ConfigError, make_config
from p2pfl.data.augment import ImageTransform
from p2pfl.data.datasets import DATASETS, load_dataset
from p2pfl.registry import UnknownComponent
from topologies.streams import SHARED, numpy_rng

from conftest import run_job, timing_free_records

SIDE = 16


pytestmark = pytest.mark.usefixtures("own_cache")  # the folder cache is written in the test's own data root


def _images(n: int, shape: tuple[int, ...] = (SIDE, SIDE, 3), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n learnable uint8 images (class k is brighter in its own band of rows) and their labels (3 classes)."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 3)
    x = rng.integers(0, 96, (n, *shape), dtype=np.uint8)
    for k in range(3):
        x[y == k, 5 * k:5 * k + 5] += 150
    return x, y


def _cfg(dataset: str, **options: object):
    return make_config(algorithm="fedavg", dataset=dataset, **options)


def _load(dataset: str, **options: object):
    return load_dataset(dataset, cfg=_cfg(dataset, **options))


def _one_line_refusal(dataset: str, message: str, **options: object) -> None:
    with pytest.raises(ValueError) as e:
        load_dataset(dataset, cfg=_cfg(dataset, **options) if options else None)
    text = str(e.value)
    assert text.startswith(f"--dataset {dataset}: ") and message in text and "\n" not in text, text


# ------------------------------------------------------------------ the registry's prefix form

def test_a_component_named_with_an_argument(tmp_path: Path) -> None:
    assert "npz:/x/y.npz" in DATASETS and "folder:imgs" in DATASETS and "NPZ:/x/Y.npz" in DATASETS
    assert "npz" not in DATASETS and "npz:" not in DATASETS and "cifar10:/x" not in DATASETS
    bound = DATASETS.get("npz:/x/Y.npz")
    assert issubclass(bound, DATASETS.get("npz")) and bound.name == "npz" and bound.argument == "/x/Y.npz"
    assert DATASETS.get("npz:/x/Y.npz") is bound and DATASETS.get("npz").argument is None
    assert "npz:PATH" in DATASETS.choices() and "folder:PATH" in DATASETS.choices()
    with pytest.raises(UnknownComponent, match=r"^--dataset: unknown dataset 'cifar10:x'; allowed: .*npz:PATH"):
        DATASETS.get("cifar10:x")
    with pytest.raises(ConfigError,
                       match=r"^--dataset: unknown value 'npz'; did you mean npz:PATH\? allowed: .*folder:PATH, "
                             r"leaf:PATH, hf:PATH, hf-table:PATH, hf-text:PATH, npz:PATH"):
        _cfg("npz")
    with pytest.raises(ConfigError, match=r"^--dataset: npz:nowhere\.npz: no such file$"):
        _cfg("npz:nowhere.npz")
    with pytest.raises(ConfigError, match=r"^--dataset: folder:nowhere: no such folder$"):
        _cfg("folder:nowhere")


def test_help_shows_the_argument() -> None:
    proc = run_job(["-m", "p2pfl.run", "--help"], ranks=0)
    assert proc.returncode == 0 and "npz:PATH" in proc.stdout and "folder:PATH" in proc.stdout, proc.stdout


# ------------------------------------------------------------------ npz:PATH

@pytest.mark.parametrize("layout", ["nhwc", "nchw", "grey", "float"])
def test_npz_is_read_back_equal(tmp_path: Path, layout: str) -> None:
    """uint8 N×H×W×C, N×C×H×W and N×H×W as they are; float in [0, 1] as round(255 x), half to even; held as
    uint8 N×C×H×W; the classes counted from the labels unless named; the normalisation the training images'."""
    x, y = _images(40)
    xt, yt = _images(12, seed=1)
    stored = {"nhwc": (x, xt), "nchw": (x.transpose(0, 3, 1, 2), xt.transpose(0, 3, 1, 2)),
              "grey": (x[..., 0], xt[..., 0]), "float": (x / 255.0, xt / 255.0)}[layout]
    extra = {"classes": np.array(["a", "b", "c", "d"])} if layout == "nchw" else {}
    np.savez(tmp_path / "d.npz", x_train=stored[0], y_train=y, x_test=stored[1], y_test=yt, **extra)
    ds = load_dataset(f"npz:{tmp_path / 'd.npz'}")
    want = (x[..., :1] if layout == "grey" else x).transpose(0, 3, 1, 2)
    if layout == "float":
        want = np.round(stored[0].transpose(0, 3, 1, 2) * 255).astype(np.uint8)
    assert ds.x_train.dtype == torch.uint8 and np.array_equal(ds.x_train.numpy(), want)
    assert np.array_equal(ds.y_train.numpy(), y) and ds.y_train.dtype == torch.int64
    assert np.array_equal(ds.y_test.numpy(), yt) and ds.x_test.shape[0] == 12
    assert ds.num_classes == (4 if extra else 3) and ds.classes == (("a", "b", "c", "d") if extra else ("0", "1", "2"))
    q = want.astype(np.float64) / 255
    np.testing.assert_allclose(ds.mean, q.mean(axis=(0, 2, 3)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ds.std, q.std(axis=(0, 2, 3), ddof=1), rtol=0, atol=1e-12)
    assert ds.extra["mean"] == list(ds.mean) and ds.extra["source"] == str((tmp_path / "d.npz").resolve())


def test_npz_test_split_against_an_independent_draw(tmp_path: Path) -> None:
    x, y = _images(50)
    np.savez(tmp_path / "t.npz", x_train=x, y_train=y)
    ds = _load(f"npz:{tmp_path / 't.npz'}", test_split=0.2, split_seed=7)
    held = np.sort(numpy_rng(7, SHARED, "test-split").permutation(50)[:10])
    kept = np.setdiff1d(np.arange(50), held)
    assert np.array_equal(ds.x_test.numpy(), x[held].transpose(0, 3, 1, 2))
    assert np.array_equal(ds.x_train.numpy(), x[kept].transpose(0, 3, 1, 2))
    assert np.array_equal(ds.y_test.numpy(), y[held]) and np.array_equal(ds.y_train.numpy(), y[kept])
    assert ds.extra["test_split"] == 0.2 and ds.extra["split_seed"] == 7
    again = _load(f"npz:{tmp_path / 't.npz'}", test_split=0.2, split_seed=7, seed=3)  # the run's seed aside
    assert torch.equal(again.x_test, ds.x_test) and again.extra["digest"] == ds.extra["digest"]
    other = _load(f"npz:{tmp_path / 't.npz'}", test_split=0.2, split_seed=8)
    assert not torch.equal(other.x_test, ds.x_test) and other.extra["digest"] != ds.extra["digest"]


def test_own_images_are_mirrored_unless_no_flip(tmp_path: Path) -> None:
    """npz: and folder: images keep the photographs' transform (mirrored, zero padding; their manifest record as it
    was) unless --no-flip, which the record states; --no-flip on a dataset of no images is refused."""
    x, y = _images(20)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    ds = _load(f"npz:{tmp_path / 'd.npz'}")
    assert ds.transform == ImageTransform(flip=True, fill=0) and "augment" not in ds.extra
    kept = _load(f"npz:{tmp_path / 'd.npz'}", flip=False)
    assert kept.transform == ImageTransform(flip=False, fill=0) and kept.extra["augment"] == {"flip": False, "pad": 0}
    _folder(tmp_path / "f", x, y)
    assert not _load(f"folder:{tmp_path / 'f'}", image_size=SIDE, test_split=0.25, flip=False).transform.flip
    (tmp_path / "t.csv").write_text("a,label\n1,0\n2,1\n3,0\n4,1\n")
    with pytest.raises(ConfigError, match=r"^--flip: --dataset csv:\S+ gives feature vectors, no images to mirror$"):
        make_config(algorithm="fedavg", model="mlp", dataset=f"csv:{tmp_path / 't.csv'}", test_split=0.5, flip=False)


def test_malformed_npz_refused_in_one_line(tmp_path: Path) -> None:
    x, y = _images(10)
    bad = {
        "lacks array(s) y_train": dict(x_train=x, x_test=x, y_test=y),
        "y_train must hold one label per image (10)": dict(x_train=x, y_train=y[:9], x_test=x, y_test=y),
        "y_train must be integer labels, got float64": dict(x_train=x, y_train=y * 1.0, x_test=x, y_test=y),
        "x_train holds NaN or infinite values": dict(x_train=np.where(x > 200, np.nan, x / 255.0), y_train=y,
                                                     x_test=x, y_test=y),
        "float images must lie in [0, 1], x_test holds [0, 1.9": dict(x_train=x, y_train=y, x_test=x / 127.5,
                                                                    y_test=y),
        "x_train must be square images": dict(x_train=x[:, :, :12], y_train=y, x_test=x, y_test=y),
        "x_train must be uint8 or float in [0, 1], got int64": dict(x_train=x.astype(np.int64), y_train=y,
                                                                    x_test=x, y_test=y),
        "y_test holds negative labels (-1)": dict(x_train=x, y_train=y, x_test=x, y_test=y - 1),
        "give both x_test and y_test": dict(x_train=x, y_train=y, x_test=x),
        "train images are (3, 16, 16), test images (1, 16, 16)": dict(x_train=x, y_train=y, x_test=x[..., 0],
                                                                       y_test=y),
        "labels reach 2 but 2 classes are named": dict(x_train=x, y_train=y, x_test=x, y_test=y,
                                                       classes=np.array(["a", "b"])),
        "holds pickled Python objects": dict(x_train=np.array([x, "not an image"], dtype=object), y_train=y,
                                             x_test=x, y_test=y),
    }
    for k, (message, arrays) in enumerate(bad.items()):
        path = tmp_path / f"bad{k}.npz"
        np.savez(path, **arrays)
        _one_line_refusal(f"npz:{path}", message)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    _one_line_refusal(f"npz:{tmp_path / 'junk.npz'}", "is not an .npz file")
    (tmp_path / "cut.npz").write_bytes(b"PK\x03\x04 and then nothing")
    _one_line_refusal(f"npz:{tmp_path / 'cut.npz'}", "is not a readable .npz file (BadZipFile")
    import pickle

    (tmp_path / "p.npz").write_bytes(pickle.dumps({"x_train": x}))
    _one_line_refusal(f"npz:{tmp_path / 'p.npz'}", "is a Python pickle, refused")
    np.save(tmp_path / "one.npy", x)
    _one_line_refusal(f"npz:{tmp_path / 'one.npy'}", "is one array (.npy), not an .npz archive")


def test_the_test_split_is_asked_for_exactly_when_needed(tmp_path: Path) -> None:
    x, y = _images(10)
    np.savez(tmp_path / "own.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    np.savez(tmp_path / "train.npz", x_train=x, y_train=y)
    with pytest.raises(ConfigError, match=r"^--test-split: npz:.*own\.npz holds a test set of its own; leave "):
        _cfg(f"npz:{tmp_path / 'own.npz'}", test_split=0.5)
    with pytest.raises(ConfigError, match=r"^--test-split: npz:.*train\.npz holds no test set \(x_test, y_test\): "
                                          r"give --test-split FRACTION$"):
        _cfg(f"npz:{tmp_path / 'train.npz'}")
    with pytest.raises(ConfigError, match=r"^--test-split: must lie in \(0, 1\), got 1"):
        _cfg(f"npz:{tmp_path / 'train.npz'}", test_split=1.0)


# ------------------------------------------------------------------ folder:PATH

def _folder(root: Path, x: np.ndarray, y: np.ndarray, suffix: str = ".png") -> None:
    """One PNG per image under root/class<k>/ (a lossless format: read back equal)."""
    for i, (img, label) in enumerate(zip(x, y)):
        d = root / f"class{label}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).save(d / f"{i:03d}{suffix}")


def _order(y: np.ndarray) -> np.ndarray:
    """The order folder: reads the images _folder wrote: by class folder, then by file name."""
    return np.concatenate([np.flatnonzero(y == k) for k in range(3)])


@pytest.mark.parametrize("channels", [3, 1])
def test_folder_is_read_back_equal(tmp_path: Path, channels: int) -> None:
    """train/ and test/ trees of PNGs already --image-size square: the images exactly, grey when all are."""
    x, y = _images(30, (SIDE, SIDE, channels))
    xt, yt = _images(9, (SIDE, SIDE, channels), seed=1)
    _folder(tmp_path / "f" / "train", x, y)
    _folder(tmp_path / "f" / "test", xt, yt)
    ds = _load(f"folder:{tmp_path / 'f'}", image_size=SIDE)
    o, ot = _order(y), _order(yt)
    assert np.array_equal(ds.x_train.numpy(), x[o].transpose(0, 3, 1, 2)) and ds.x_train.shape[1] == channels
    assert np.array_equal(ds.y_train.numpy(), y[o]) and np.array_equal(ds.y_test.numpy(), yt[ot])
    assert np.array_equal(ds.x_test.numpy(), xt[ot].transpose(0, 3, 1, 2))
    assert ds.classes == ("class0", "class1", "class2") and ds.num_classes == 3


def test_folder_resizes_any_size_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Images of several sizes, each as Pillow resizes it to --image-size (bilinear, RGB); decoded once into the
    data root's cache, then read from it; a changed file is decoded again."""
    rng = np.random.default_rng(2)
    sizes = [(20, 30), (9, 9), (40, 17), (16, 16), (33, 12), (25, 25)]
    want = []
    for i, (h, w) in enumerate(sizes):
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        (tmp_path / "f" / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        img.save(tmp_path / "f" / f"c{i % 2}" / f"{i}.png")
        want.append((i % 2, i, np.asarray(img.resize((8, 8), Image.Resampling.BILINEAR))))
    want.sort(key=lambda t: (t[0], t[1]))
    ds = _load(f"folder:{tmp_path / 'f'}", image_size=8, test_split=0.5)
    pooled = torch.cat([ds.x_train, ds.x_test]).numpy().transpose(0, 2, 3, 1)
    expected = np.stack([w for _, _, w in want])
    assert sorted(map(bytes, pooled)) == sorted(map(bytes, expected))
    cached = list((tmp_path / "root" / "folders").glob("folder-*.npz"))
    assert len(cached) == 1
    from p2pfl.data.datasets.folder import Folder

    with monkeypatch.context() as patched:
        patched.setattr(Folder, "decode", lambda *a: pytest.fail("decoded again"))
        again = _load(f"folder:{tmp_path / 'f'}", image_size=8, test_split=0.5)
    assert torch.equal(again.x_train, ds.x_train) and again.extra["digest"] == ds.extra["digest"]
    Image.fromarray(np.zeros((5, 5, 3), dtype=np.uint8)).save(tmp_path / "f" / "c0" / "0.png")
    changed = _load(f"folder:{tmp_path / 'f'}", image_size=8, test_split=0.5)
    assert changed.extra["digest"] != ds.extra["digest"]
    assert len(list((tmp_path / "root" / "folders").glob("folder-*.npz"))) == 2


def test_malformed_folder_refused_in_one_line(tmp_path: Path) -> None:
    x, y = _images(6)
    _folder(tmp_path / "broken", x, y)
    (tmp_path / "broken" / "class1" / "zz.png").write_bytes(b"this is no png")
    _one_line_refusal(f"folder:{tmp_path / 'broken'}", "class1/zz.png is not an image Pillow can read", test_split=0.5)
    _folder(tmp_path / "empty", x, y)
    (tmp_path / "empty" / "class3").mkdir()
    (tmp_path / "empty" / "class3" / "notes.txt").write_text("no images here")
    _one_line_refusal(f"folder:{tmp_path / 'empty'}", "class folder(s) class3 hold no images", test_split=0.5)
    _folder(tmp_path / "split" / "train", x[y < 2], y[y < 2])
    _folder(tmp_path / "split" / "test", x, y)
    _one_line_refusal(f"folder:{tmp_path / 'split'}", "test/ has classes the train folders lack: class2")
    (tmp_path / "flat").mkdir()
    Image.fromarray(x[0]).save(tmp_path / "flat" / "a.png")
    _one_line_refusal(f"folder:{tmp_path / 'flat'}", "holds no class folders", test_split=0.5)


# ------------------------------------------------------------------ runs

def _manifest_records_the_data(run, train: int, test: int, name: str) -> None:
    dataset = run.manifest["dataset"]
    assert dataset["name"] == name and dataset["train"] == train and dataset["test"] == test
    assert dataset["digest"].startswith("sha256:") and len(dataset["mean"]) == len(dataset["std"]) == 3
    assert sum(run.manifest["partition"]["sizes"]) == train


SMALL = dict(algorithm="fedavg", peers=4, rounds=2, local_steps=2, batch_size=8, eval_every=1, progress=False,
             plots=False)


def test_fedavg_runs_on_an_npz_and_a_folder(tmp_path: Path) -> None:
    from p2pfl.simulation import simulate

    x, y = _images(96)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y)
    run = simulate(dataset=f"npz:{tmp_path / 'd.npz'}", test_split=0.25, train_subset=64, out=str(tmp_path / "a"),
                   **SMALL)
    _manifest_records_the_data(run, 64, 24, "npz")
    assert 0.0 <= run.summary["final"]["test_acc_avg"] <= 1.0
    _folder(tmp_path / "f" / "train", x[:72], y[:72])
    _folder(tmp_path / "f" / "test", x[72:], y[72:])
    run = simulate(dataset=f"folder:{tmp_path / 'f'}", image_size=SIDE, out=str(tmp_path / "b"), **SMALL)
    _manifest_records_the_data(run, 72, 24, "folder")
    assert run.manifest["partition"]["classes"] == ["class0", "class1", "class2"]


@pytest.mark.mpi
def test_a_folder_run_on_one_and_two_ranks_bit_for_bit(tmp_path: Path) -> None:
    """Every rank reads the cache the node leader decoded; the records agree with one process's bit for bit."""
    x, y = _images(64)
    _folder(tmp_path / "f", x, y)
    args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", f"folder:{tmp_path / 'f'}", "--image-size",
            str(SIDE), "--test-split", "0.25", "--peers", "4", "--rounds", "2", "--local-steps", "2", "--batch-size",
            "8", "--eval-every", "1", "--batch-peers", "off", "--no-progress", "--no-plots", "--out",
            str(tmp_path / "runs")]  # peer by peer: compared bit for bit across layouts
    env = {"P2PFL_DATA": str(tmp_path / "root"), "HOME": str(tmp_path / "home")}
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*args, "--name", name], ranks=ranks, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert timing_free_records(tmp_path / "runs" / "two") == timing_free_records(tmp_path / "runs" / "one")
    manifests = [json.loads((tmp_path / "runs" / n / "manifest.json").read_text()) for n in ("one", "two")]
    assert manifests[0]["dataset"] == manifests[1]["dataset"] and manifests[1]["world_size"] == 2
