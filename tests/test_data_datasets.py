"""Datasets: the real files where CI keeps them, the on-disk layouts, the synthetic set, the not-found message."""
from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfl.data import datasets as D
from p2pfl.data.datasets import (
    DatasetNotFound,
    _files,
    data_root,
    ensure_dataset,
    fashion_mnist,
    load_dataset,
    synthetic_dataset,
)

ROOT = Path(__file__).resolve().parent.parent
CIFAR_JPEG = ROOT.parent / "shared" / "data" / "cifar10-jpeg.npz"
DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """An empty data root, no $P2PFL_DATA, and a HOME whose ~/.cache/p2pfl is empty."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("P2PFL_DATA", raising=False)
    root = tmp_path / "data"
    root.mkdir()
    return root


# ------------------------------------------------------------------------------------------------ real data

@pytest.mark.skipif(not (DEBIAN_FMNIST / "train-images-idx3-ubyte.gz").is_file(),
                    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist; "
                           "scripts/setup.sh does it as root)")
def test_fashion_mnist_from_debian_files(isolated):
    ds = load_dataset("fashion-mnist", data_dir=isolated)
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert ds.x_train.dtype == torch.uint8 and ds.y_train.dtype == torch.int64
    assert torch.equal(torch.bincount(ds.y_train), torch.full((10,), 6000))
    assert ds.y_train[:3].tolist() == [9, 0, 0] and ds.y_test[:3].tolist() == [9, 2, 1]
    # the published pixel statistics of the training set
    assert abs(ds.x_train.float().mean().item() / 255 - 0.2860) < 1e-3
    assert ds.mean == (0.2860,) and ds.channels == 1 and ds.image_size == 28
    assert ds.classes[9] == "Ankle boot" and ds.extra["source"] == str(DEBIAN_FMNIST)


@pytest.fixture(scope="session")
def cifar10_decoded(tmp_path_factory):
    """Decode the shared JPEG archive once (via ensure_dataset, as a node leader would) into a temporary root."""
    if not CIFAR_JPEG.is_file():
        pytest.skip(f"{CIFAR_JPEG} absent (the shared CIFAR-10 archive)")
    root = tmp_path_factory.mktemp("cifar-root")
    shared = tmp_path_factory.mktemp("shared-data")  # the archive alone: whatever else ../shared/data may hold
    (shared / CIFAR_JPEG.name).symlink_to(CIFAR_JPEG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root / "home"))
        mp.delenv("P2PFL_DATA", raising=False)
        mp.setattr(_files, "shared_data_dirs", lambda: [shared])
        calls = []
        ensure_dataset("cifar10", data_dir=root, barrier=lambda: calls.append(1), is_node_leader=True)
        assert calls == [1]
        ds = load_dataset("cifar10", data_dir=root)
    return root, ds


def test_cifar10_from_shared_jpeg_archive(cifar10_decoded):
    root, ds = cifar10_decoded
    assert (root / "cifar10.npz").is_file(), "the decoded archive is cached in the data root"
    assert ds.extra["source"] == str(root / "cifar10.npz")
    assert ds.x_train.shape == (50000, 3, 32, 32) and ds.x_test.shape == (10000, 3, 32, 32)
    assert ds.x_train.dtype == torch.uint8 and ds.y_train.dtype == torch.int64
    assert torch.equal(torch.bincount(ds.y_train), torch.full((10,), 5000))
    assert torch.equal(torch.bincount(ds.y_test), torch.full((10,), 1000))
    assert ds.classes == D.CIFAR10_CLASSES and ds.num_classes == 10
    # independent decode of a few images straight from the archive with Pillow (HWC -> CHW)
    from PIL import Image
    with np.load(CIFAR_JPEG) as z:
        data, offs, labels = z["test_bytes"], z["test_offsets"], z["test_labels"]
        for k in (0, 1234, 9999):
            img = np.asarray(Image.open(io.BytesIO(data[offs[k]:offs[k + 1]].tobytes())).convert("RGB"))
            assert np.array_equal(ds.x_test[k].permute(1, 2, 0).numpy(), img)
            assert int(ds.y_test[k]) == int(labels[k])
    # pixel statistics close to CIFAR-10's (JPEG re-encoding moves them a little)
    mean = ds.x_train[::10].float().mean(dim=(0, 2, 3)) / 255  # the archive is sorted by class: stride
    assert torch.allclose(mean, torch.tensor(ds.mean), atol=0.02)


def test_cifar10_cache_is_reused(cifar10_decoded, monkeypatch):
    root, ds = cifar10_decoded
    monkeypatch.setattr(_files, "_decode_jpeg_npz", lambda *_: pytest.fail("decoded again instead of using the cache"))
    again = load_dataset("cifar10", data_dir=root)
    assert torch.equal(again.y_train, ds.y_train) and torch.equal(again.x_test[:100], ds.x_test[:100])


# ------------------------------------------------------------------------------------------------ layouts

def _idx_bytes(a: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape)
    return header + a.astype(np.uint8).tobytes()


@pytest.mark.parametrize("compressed", [True, False])
def test_fashion_mnist_torchvision_layout(isolated, compressed):
    rng = np.random.default_rng(0)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (12, 28, 28)),
              "train-labels-idx1-ubyte": rng.integers(0, 10, 12),
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (5, 28, 28)),
              "t10k-labels-idx1-ubyte": rng.integers(0, 10, 5)}
    raw = isolated / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for stem, a in arrays.items():
        if compressed:
            with gzip.open(raw / (stem + ".gz"), "wb") as f:
                f.write(_idx_bytes(a))
        else:
            (raw / stem).write_bytes(_idx_bytes(a))
    ds = load_dataset("fashion_mnist", data_dir=isolated)
    assert ds.extra["source"] == str(raw)
    assert np.array_equal(ds.x_train[:, 0].numpy(), arrays["train-images-idx3-ubyte"])
    assert np.array_equal(ds.y_test.numpy(), arrays["t10k-labels-idx1-ubyte"])


def _write_pickle(path: Path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def test_cifar10_torchvision_pickles(isolated):
    rng = np.random.default_rng(1)
    folder = isolated / "cifar-10-batches-py"
    folder.mkdir()
    batches = []
    for k in range(1, 6):
        b = {"data": rng.integers(0, 256, (4, 3072)).astype(np.uint8), "labels": list(rng.integers(0, 10, 4))}
        _write_pickle(folder / f"data_batch_{k}", b)
        batches.append(b)
    test = {"data": rng.integers(0, 256, (3, 3072)).astype(np.uint8), "labels": [1, 2, 3]}
    _write_pickle(folder / "test_batch", test)
    _write_pickle(folder / "batches.meta", {"label_names": list(D.CIFAR10_CLASSES)})
    ds = load_dataset("cifar10", data_dir=isolated)
    assert ds.x_train.shape == (20, 3, 32, 32)
    # pickled rows are R-plane, G-plane, B-plane of 32×32 each
    assert np.array_equal(ds.x_train[5, 1].numpy(), batches[1]["data"][1, 1024:2048].reshape(32, 32))
    assert ds.y_train.tolist() == [int(v) for b in batches for v in b["labels"]]
    assert ds.y_test.tolist() == [1, 2, 3]


def test_cifar100_pickles_and_npz(isolated):
    rng = np.random.default_rng(2)
    folder = isolated / "cifar-100-python"
    folder.mkdir()
    train = {"data": rng.integers(0, 256, (6, 3072)).astype(np.uint8), "fine_labels": [0, 5, 99, 3, 2, 1],
             "coarse_labels": [0] * 6}
    _write_pickle(folder / "train", train)
    _write_pickle(folder / "test", {"data": train["data"][:2], "fine_labels": [7, 8], "coarse_labels": [0, 0]})
    _write_pickle(folder / "meta", {"fine_label_names": [f"c{k}" for k in range(100)]})
    ds = load_dataset("cifar100", data_dir=isolated)
    assert ds.num_classes == 100 and ds.y_train.tolist() == [0, 5, 99, 3, 2, 1] and ds.classes[99] == "c99"

    other = isolated / "npz-root"
    other.mkdir()
    x = rng.integers(0, 256, (4, 32, 32, 3)).astype(np.uint8)
    np.savez(other / "cifar100.npz", x_train=x, y_train=np.array([1, 2, 3, 4]), x_test=x[:1], y_test=np.array([9]))
    ds2 = load_dataset("cifar100", data_dir=other)
    assert torch.equal(ds2.x_train, torch.from_numpy(x).permute(0, 3, 1, 2))
    assert ds2.y_test.tolist() == [9]


# ------------------------------------------------------------------------------------------------ errors, roots

def test_not_found_is_one_line_with_the_remedies(isolated, monkeypatch):
    with pytest.raises(DatasetNotFound) as e:
        load_dataset("cifar100", data_dir=isolated)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg
    for part in (str(isolated / "cifar-100-python"), "--data-dir", "P2PFL_DATA", "--download"):
        assert part in msg

    monkeypatch.setattr(fashion_mnist, "DEBIAN_FASHION_MNIST", isolated / "no-debian")
    with pytest.raises(DatasetNotFound, match="apt-get install dataset-fashion-mnist") as e:
        load_dataset("fashion-mnist", data_dir=isolated)
    assert "\n" not in str(e.value)

    monkeypatch.setattr(_files, "shared_data_dirs", lambda: [isolated / "no-shared"])
    with pytest.raises(DatasetNotFound, match="cifar10_jpeg.py") as e:
        load_dataset("cifar10", data_dir=isolated)
    assert "\n" not in str(e.value)


def test_failed_download_is_one_line(isolated, monkeypatch):
    import torchvision

    class Offline:
        def __init__(self, *a, **k):
            raise OSError("no route to host\nmore detail")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", Offline)
    with pytest.raises(DatasetNotFound, match="downloading 'cifar100'") as e:
        load_dataset("cifar100", data_dir=isolated, allow_download=True)
    assert "\n" not in str(e.value)


def test_ensure_dataset_leader_and_followers(isolated):
    calls = []
    barrier = lambda: calls.append("b")  # noqa: E731
    ensure_dataset("cifar100", data_dir=isolated, barrier=barrier, is_node_leader=False)  # waits only
    assert calls == ["b"]
    with pytest.raises(DatasetNotFound):
        ensure_dataset("cifar100", data_dir=isolated, barrier=barrier, is_node_leader=True)
    assert calls == ["b", "b"], "the leader reaches the barrier even when it fails"
    ensure_dataset("synthetic", barrier=barrier)


def test_data_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("P2PFL_DATA", raising=False)
    assert data_root() == tmp_path / ".cache" / "p2pfl"
    monkeypatch.setenv("P2PFL_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "arg") == tmp_path / "arg"


def test_bad_names_and_options():
    with pytest.raises(ValueError, match="choose one of"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match="synthetic dataset only"):
        load_dataset("cifar100", num_train=10)


# ------------------------------------------------------------------------------------------------ synthetic

def test_synthetic_is_deterministic_and_configurable():
    a = load_dataset("synthetic", seed=3)
    b = synthetic_dataset(seed=3)
    c = synthetic_dataset(seed=4)
    assert a.x_train.shape == (2000, 3, 32, 32) and a.x_test.shape == (500, 3, 32, 32)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, c.x_train)
    assert torch.equal(torch.bincount(a.y_train), torch.full((10,), 200))
    small = synthetic_dataset(num_train=30, num_test=7, num_classes=3, channels=1, image_size=28)
    assert small.x_train.shape == (30, 1, 28, 28) and small.x_test.shape == (7, 1, 28, 28)
    assert small.num_classes == 3 and len(small.mean) == 1


def test_synthetic_is_learnable():
    """A nearest-class-mean classifier fitted on the training images labels most test images right."""
    ds = synthetic_dataset(seed=0)
    xtr, xte = ds.x_train.flatten(1).float(), ds.x_test.flatten(1).float()
    means = torch.stack([xtr[ds.y_train == k].mean(0) for k in range(10)])
    pred = torch.cdist(xte, means).argmin(1)
    assert (pred == ds.y_test).float().mean() > 0.9
