"""Data files are read without running code: a CIFAR pickle that names any function but numpy's array
constructors is refused with one line naming it, and the function never runs; genuine CIFAR batches still load."""
from __future__ import annotations

import builtins
import os
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from p2pfl.data.cifar_pickle import DataFileRefused
from p2pfl.data.datasets import load_dataset

from conftest import run_job


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data root, no $P2PFL_DATA, and a HOME whose ~/.cache/p2pfl is empty."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("P2PFL_DATA", raising=False)
    root = tmp_path / "data"
    root.mkdir()
    return root


class Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2's str (SHORT_BINSTRING / BINSTRING), as CIFAR's python batches were written:
    read back with encoding latin1 they are str, and numpy takes them for an array's raw data."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def write_cifar(path: Path, obj: object, numpy_package: str = "numpy._core") -> None:
    """`obj` pickled like CIFAR's files (protocol 2, bytes keys as py2 str), its arrays named from `numpy_package`
    (numpy 1 wrote numpy.core)."""
    with open(path, "wb") as f:
        Py2Pickler(f, protocol=2).dump(obj)
    raw = path.read_bytes().replace(b"cnumpy._core.multiarray\n", f"c{numpy_package}.multiarray\n".encode())
    path.write_bytes(raw)


def genuine_batch(rng: np.random.Generator, n: int, name: bytes) -> dict:
    return {b"batch_label": name, b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3072)).astype(np.uint8),
            b"filenames": [b"img_%d.png" % k for k in range(n)]}


class Marks:
    """Unpickled, it calls `how` to leave the marker file behind (a data file crafted to run code)."""

    def __init__(self, marker: Path, how: str) -> None:
        self.marker, self.how = str(marker), how

    def __reduce__(self):
        if self.how == "system":
            return os.system, (f"touch {self.marker}",)
        return builtins.open, (self.marker, "w")


def cifar_folder(root: Path, first_batch: object) -> Path:
    """A cifar-10-batches-py folder whose data_batch_1 holds `first_batch`, its test batch genuine."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    write_cifar(folder / "data_batch_1", first_batch)
    write_cifar(folder / "test_batch", genuine_batch(np.random.default_rng(0), 3, b"testing batch 1 of 1"))
    return folder


@pytest.mark.parametrize("how", ["system", "open"])
@pytest.mark.parametrize("where", ["whole", "nested"])
def test_a_crafted_batch_is_refused_and_its_payload_never_runs(isolated: Path, how: str, where: str) -> None:
    marker = isolated.parent / "marker"
    payload = Marks(marker, how)
    if where == "nested":  # after arrays were built: the refusal is not only of a first global
        payload = {**genuine_batch(np.random.default_rng(1), 2, b"b"), b"labels": [0, payload]}
    folder = cifar_folder(isolated, payload)
    with pytest.raises(DataFileRefused) as refused:
        load_dataset("cifar10", data_dir=isolated)
    message = str(refused.value)
    called = "posix.system" if how == "system" else "io.open"
    assert message == (f"{folder / 'data_batch_1'}: refused: its pickle would call {called}; a CIFAR batch holds "
                       "only dicts, lists, strings, numbers and numpy arrays (nothing in it was run)")
    assert not marker.exists()


@pytest.mark.parametrize("numpy_package", ["numpy.core", "numpy._core"])
def test_genuine_cifar_batches_still_load(isolated: Path, numpy_package: str) -> None:
    rng = np.random.default_rng(2)
    folder = isolated / "cifar-10-batches-py"
    folder.mkdir()
    batches = [genuine_batch(rng, 4, b"training batch %d of 5" % k) for k in (1, 2)]
    for k, batch in enumerate(batches, start=1):
        write_cifar(folder / f"data_batch_{k}", batch, numpy_package)
    test = genuine_batch(rng, 3, b"testing batch 1 of 1")
    write_cifar(folder / "test_batch", test, numpy_package)
    names = [b"plane", b"car", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    write_cifar(folder / "batches.meta", {b"num_cases_per_batch": 4, b"label_names": names, b"num_vis": 3072},
                numpy_package)
    assert f"c{numpy_package}.multiarray\n_reconstruct".encode() in (folder / "data_batch_1").read_bytes()
    ds = load_dataset("cifar10", data_dir=isolated)
    assert ds.x_train.shape == (8, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    # a row is the R plane, then G, then B, each 32 rows of 32 pixels
    assert np.array_equal(ds.x_train[5, 2].numpy(), batches[1][b"data"][1, 2048:].reshape(32, 32))
    assert np.array_equal(ds.x_test.numpy().reshape(3, -1), test[b"data"])
    assert ds.y_train.tolist() == batches[0][b"labels"] + batches[1][b"labels"]
    assert ds.y_test.tolist() == test[b"labels"]
    assert ds.classes == tuple(n.decode() for n in names)


@pytest.mark.parametrize("batch, wrong", [
    ({b"labels": [1]}, "'data' must be a uint8 array of rows of 3072 bytes"),
    ({b"data": np.zeros((2, 3072), np.float32), b"labels": [1, 2]}, "'data' must be a uint8 array of rows"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "'labels' must be 2 integer labels in [0, 10)"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 10]}, "'labels' must be 2 integer labels in [0, 10)"),
    ([1, 2], "'data' must be a uint8 array of rows of 3072 bytes"),
])
def test_a_batch_of_another_form_is_refused_naming_it(isolated: Path, batch: object, wrong: str) -> None:
    folder = cifar_folder(isolated, batch)
    start = re.escape(f"{folder / 'data_batch_1'}: not a CIFAR batch: ")
    with pytest.raises(DataFileRefused, match=f"^{start}") as refused:
        load_dataset("cifar10", data_dir=isolated)
    assert wrong in str(refused.value) and "\n" not in str(refused.value)


def test_a_truncated_batch_is_one_line_naming_it(isolated: Path) -> None:
    folder = cifar_folder(isolated, genuine_batch(np.random.default_rng(3), 2, b"b"))
    path = folder / "data_batch_1"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DataFileRefused) as refused:
        load_dataset("cifar10", data_dir=isolated)
    assert str(refused.value) == f"{path}: not a readable CIFAR pickle (UnpicklingError)"


@pytest.mark.mpi
def test_the_command_line_refuses_a_crafted_batch_on_every_rank(isolated: Path, tmp_path: Path) -> None:
    """Under mpirun -n 2: one line, exit status 2, the payload run by no rank, no traceback."""
    marker = tmp_path / "marker"
    folder = cifar_folder(isolated, Marks(marker, "system"))
    job = run_job(["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "cifar10", "--data-dir", str(isolated),
                   "--peers", "2", "--rounds", "1", "--out", str(tmp_path / "runs"), "--no-progress", "--no-plots"],
                  ranks=2, timeout=180, env={"HOME": str(tmp_path / "home")})
    assert job.returncode == 2, job.stderr[-2000:]
    assert job.stderr.strip().splitlines() == [
        f"p2pfl: error: {folder / 'data_batch_1'}: refused: its pickle would call posix.system; a CIFAR batch holds "
        "only dicts, lists, strings, numbers and numpy arrays (nothing in it was run)"]
    assert not marker.exists()
