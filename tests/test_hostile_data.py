"""Issue 55, "sizes from data are bounded before allocation": hostile data files and traces, generated here, each
refused by the real command line in one line naming its option or file and the limit, exit status 2, no traceback,
under an address-space cap that an allocation of what the file claims would break; and the .npy/.npz header readers
(p2pfl.runtime.limits) against arrays np.save wrote, and against headers claiming more than the memory budget."""
from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from p2pfl.data.datasets._files import cached
from p2pfl.runtime import limits

ROOT = Path(__file__).resolve().parents[1]
#: The address-space cap of a run: torch's libraries alone map more than 2 GiB (libtorch_cpu fails to load under
#: 2 GiB, libtorch_cuda under 3), so 4 GiB, far below any claim below. The budget is then 2 GiB (limits.max_bytes).
ADDRESS_SPACE = 4 << 30
#: A run's options besides the case's: two peers, one round, on the CPU (a GPU's context maps more than the cap).
RUN = ["--algorithm", "fedavg", "--peers", "2", "--rounds", "1", "--device", "cpu", "--no-plots", "--no-progress"]


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def npy_header(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    """An .npy file's header (version 1.0) declaring `shape` of `descr`, its data left to the caller."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


def npy_bytes(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, a)
    return out.getvalue()


def write_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def images(n: int, side: int = 16) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, side, side, 3), dtype=np.uint8)


def leaf(users: dict[str, object], names: list | None = None) -> dict:
    """A LEAF JSON document of `users` (name -> user_data's entry)."""
    return {"users": names if names is not None else list(users), "num_samples": [2] * len(users),
            "user_data": users}


def tweets(ys: list) -> dict:
    return {"x": [["id", "date", "query", "u", f"tweet {k}"] for k in range(len(ys))], "y": ys}


def write_json(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


# Each case: (the files it writes under tmp_path -> (its options, what the line names, what it must say, env)).
Case = Callable[[Path], tuple[list[str], str, str, dict[str, str]]]


def npz_claiming_1e12_images(tmp: Path):
    path = write_zip(tmp / "x.npz", {"x_train.npy": npy_header((10 ** 12, 32, 32, 3)) + bytes(100),
                                     "y_train.npy": npy_header((10 ** 12,), "<i8") + bytes(100)})
    return ["--dataset", f"npz:{path}", "--test-split", "0.2"], str(path), "over the memory budget of 2 GiB", {}


def npz_header_larger_than_its_data(tmp: Path):
    path = write_zip(tmp / "x.npz", {"x_train.npy": npy_header((1000, 16, 16, 3)) + bytes(100),
                                     "y_train.npy": npy_bytes(np.zeros(1000, np.int64))})
    return ["--dataset", f"npz:{path}", "--test-split", "0.2"], str(path), "its file holds 100 B of data", {}


def npz_empty_archive(tmp: Path):
    path = write_zip(tmp / "x.npz", {})
    return ["--dataset", f"npz:{path}", "--test-split", "0.2"], str(path), "lacks array(s) x_train, y_train", {}


def npz_zero_bytes(tmp: Path):
    path = tmp / "x.npz"
    path.write_bytes(b"")
    return ["--dataset", f"npz:{path}", "--test-split", "0.2"], str(path), "is empty (0 bytes)", {}


def npz_label_2_to_the_40(tmp: Path):
    path = tmp / "x.npz"
    np.savez(path, x_train=images(200), y_train=np.array([2 ** 40] + [0] * 199))
    return (["--dataset", f"npz:{path}", "--test-split", "0.2"], str(path),
            "over the limit of 100000 classes; it holds 2 distinct labels: renumber them 0..1", {})


def npz_labels_up_to_995000(tmp: Path):
    path = tmp / "x.npz"
    np.savez(path, x_train=images(200), y_train=np.arange(200) * 5000)
    return (["--dataset", f"npz:{path}", "--test-split", "0.2"], str(path),
            "label of 995000: the classes are counted as the largest label + 1, over the limit of 100000 classes; "
            "it holds 200 distinct labels", {})


def leaf_nested_200000_deep(tmp: Path):
    path = tmp / "deep.json"
    path.write_text('{"users": ' + "[" * 200_000 + "]" * 200_000 + "}")
    return (["--dataset", f"leaf:{path}", "--model", "char-lstm", "--test-split", "0.2"], str(path),
            "is not readable JSON (nested too deeply)", {})


def leaf_user_data_a_list(tmp: Path):
    path = write_json(tmp / "l.json", leaf({"ann": ["to be or not", "o"]}))
    return (["--dataset", f"leaf:{path}", "--model", "char-lstm", "--test-split", "0.2"], str(path),
            "user 'ann' has no 'x' and 'y' lists", {})


def leaf_user_named_by_a_list(tmp: Path):
    path = write_json(tmp / "l.json", leaf({"ann": {"x": ["ab"], "y": ["c"]}}, names=[["ann"]]))
    return (["--dataset", f"leaf:{path}", "--model", "char-lstm", "--test-split", "0.2"], str(path),
            "'users' must list names (strings), entry 0 is list", {})


def sent140_label_1e30(tmp: Path):
    path = write_json(tmp / "s.json", leaf({"ann": tweets([10 ** 30, 0])}))
    return (["--dataset", f"sent140:{path}", "--model", "char-lstm", "--test-split", "0.5"], str(path),
            "y must be a class, an integer in [0, 100000) (Sent140: 0 negative, 1 positive), got "
            "10000000000000000...", {})


def femnist_label_1e30(tmp: Path):
    path = write_json(tmp / "f.json", leaf({"ann": {"x": [[0.5] * 784] * 2, "y": [10 ** 30, 0]}}))
    return (["--dataset", f"femnist:{path}", "--test-split", "0.5"], str(path),
            "y must be a class in [0, 62)", {})


def leaf_json_past_the_budget(tmp: Path):
    path = write_json(tmp / "l.json", leaf({f"u{k}": {"x": ["to be or not to be " * 4] * 2, "y": ["!"] * 2}
                                            for k in range(2000)}))
    return (["--dataset", f"leaf:{path}", "--model", "char-lstm", "--test-split", "0.2"], str(path),
            "of JSON, parsed into about 16 times as much: would take", {"P2PFL_MAX_BYTES": "1000000"})


def hf_image_path_missing(tmp: Path):
    datasets = pytest.importorskip("datasets")
    pa = pytest.importorskip("pyarrow")
    from PIL import Image

    png = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, format="PNG")
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    rows = [{"bytes": png.getvalue(), "path": None}] * 6
    datasets.Dataset.from_dict({"img": rows, "label": [0, 1] * 3}, features=features).save_to_disk(str(tmp / "hf"))
    (arrow,) = (tmp / "hf").glob("*.arrow")  # save_to_disk embeds an image file's bytes: the path is written here
    table = pa.ipc.open_stream(arrow.read_bytes()).read_all()
    column = table.column("img").combine_chunks()
    data, paths = column.field("bytes").to_pylist(), column.field("path").to_pylist()
    data[5], paths[5] = None, str(tmp / "gone.png")
    img = pa.StructArray.from_arrays([pa.array(data, pa.binary()), pa.array(paths, pa.string())], ["bytes", "path"])
    table = table.set_column(0, "img", img)
    with pa.ipc.new_stream(str(arrow), table.schema) as out:
        out.write_table(table)
    return (["--dataset", f"hf:{tmp / 'hf'}", "--test-split", "0.5", "--image-size", "16"], str(tmp / "hf"),
            f"column 'img': FileNotFoundError: [Errno 2] No such file or directory: '{tmp / 'gone.png'}'", {})


def csv_one_hot_24000_wide(tmp: Path):
    path = tmp / "t.csv"
    path.write_text("city,age,label\n" + "".join(f"c{i % 24000},{i % 7},{i % 2}\n" for i in range(48000)))
    return (["--dataset", f"csv:{path}", "--model", "mlp", "--test-split", "0.1"], str(path),
            "categories, over the limit of 10000 for a one-hot feature", {})


def csv_features_past_the_budget(tmp: Path):
    path = tmp / "t.csv"
    path.write_text("age,city,label\n" + "".join(f"{i % 7},c{i % 100},{i % 2}\n" for i in range(2000)))
    return (["--dataset", f"csv:{path}", "--model", "mlp", "--test-split", "0.1"], str(path),
            "2000 rows of 101 features (column 'city' one-hot to 100): would take 2.31 MiB, over the memory budget "
            "of 977 KiB", {"P2PFL_MAX_BYTES": "1000000"})


def image_size_100000(tmp: Path):
    path = tmp / "x.npz"
    np.savez(path, x_train=images(20), y_train=np.arange(20) % 2)
    return (["--dataset", f"npz:{path}", "--test-split", "0.2", "--image-size", "100000"], "--image-size",
            "must lie in [4, 1024] pixels, got 100000", {})


def max_length_1e9(tmp: Path):
    path = write_json(tmp / "s.json", leaf({"ann": tweets([1, 0])}))
    return (["--dataset", f"sent140:{path}", "--model", "char-lstm", "--test-split", "0.5", "--max-length",
             "1000000000"], "--max-length", "must lie in [2, 100000], got 1000000000", {})


def folder_images_past_the_budget(tmp: Path):
    from PIL import Image

    for tree in ("train", "test"):
        for label in ("a", "b"):
            (tmp / "f" / tree / label).mkdir(parents=True)
            Image.fromarray(images(1, 8)[0]).save(tmp / "f" / tree / label / "1.png")
    return (["--dataset", f"folder:{tmp / 'f'}", "--image-size", "1024"], str(tmp / "f"),
            "4 images of 3×1024×1024 pixels (--image-size 1024): would take 12 MiB, over the memory budget",
            {"P2PFL_MAX_BYTES": "5000000"})


def latency_matrix_claiming_1e6_square(tmp: Path):
    path = tmp / "lat.npy"
    path.write_bytes(npy_header((10 ** 6, 10 ** 6), "<f8") + bytes(64))
    return (["--dataset", "synthetic", "--latency-matrix", str(path)], f"--latency-matrix {path}",
            "shape (1000000, 1000000) by its header, need (2, 2)", {})


def compute_trace_of_8_mib(tmp: Path):
    path = tmp / "trace.txt"
    path.write_text("0.1\n" * 2_000_000)
    return (["--dataset", "synthetic", "--compute-trace", str(path)], f"--compute-trace {path}",
            "7.63 MiB, over the limit of 64.1 KiB for 2 numbers", {})


def fashion_mnist_gzip_claiming_3_tib(tmp: Path):
    import gzip

    raw = tmp / "fm" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)

    def idx(dims: tuple[int, ...], data: bytes = b"") -> bytes:
        return bytes([0, 0, 8, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims) + data

    with gzip.open(raw / "train-images-idx3-ubyte.gz", "wb") as f:
        f.write(idx((4_000_000_000, 28, 28)) + bytes(1000))
    (raw / "train-labels-idx1-ubyte").write_bytes(idx((10,), bytes(10)))
    (raw / "t10k-images-idx3-ubyte").write_bytes(idx((10, 28, 28), bytes(7840)))
    (raw / "t10k-labels-idx1-ubyte").write_bytes(idx((10,), bytes(10)))
    return (["--dataset", "fashion-mnist", "--data-dir", str(tmp / "fm")], str(raw / "train-images-idx3-ubyte.gz"),
            "its header's shape [4000000000, 28, 28]: would take 2.85 TiB, over the memory budget", {})


def cifar10_npz_claiming_11_tib(tmp: Path):
    (tmp / "c").mkdir()
    header = npy_header((10 ** 9, 32, 32, 3)) + bytes(10)
    write_zip(tmp / "c" / "cifar10.npz", {f"{k}.npy": header for k in ("x_train", "y_train", "x_test", "y_test")})
    return (["--dataset", "cifar10", "--data-dir", str(tmp / "c")], str(tmp / "c" / "cifar10.npz"),
            "x_train: shape (1000000000, 32, 32, 3) of uint8): would take", {})


CASES: list[Case] = [
    npz_claiming_1e12_images, npz_header_larger_than_its_data, npz_empty_archive, npz_zero_bytes,
    npz_label_2_to_the_40, npz_labels_up_to_995000, leaf_nested_200000_deep, leaf_user_data_a_list,
    leaf_user_named_by_a_list, sent140_label_1e30, femnist_label_1e30, leaf_json_past_the_budget,
    hf_image_path_missing, csv_one_hot_24000_wide, csv_features_past_the_budget, image_size_100000, max_length_1e9,
    folder_images_past_the_budget, latency_matrix_claiming_1e6_square, compute_trace_of_8_mib,
    fashion_mnist_gzip_claiming_3_tib, cifar10_npz_claiming_11_tib,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_a_hostile_file_is_one_line_naming_it_and_exit_status_2(case: Case, tmp_path: Path) -> None:
    args, named, says, env = case(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k != limits.MAX_BYTES_ENV}
    environ.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", P2PFL_DATA=str(tmp_path / "root"),
                   HOME=str(tmp_path / "home"), **env)
    proc = subprocess.run([sys.executable, "-m", "p2pfl.run", *RUN, "--out", str(tmp_path / "runs"), *args],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60, preexec_fn=_capped)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines and lines[-1].startswith("p2pfl: error: "), proc.stderr[-3000:]
    assert named in lines[-1] and says in lines[-1], lines[-1]


def _damaged(data: bytearray, damage: str) -> bytearray:
    """An .npz's bytes with a member's deflate stream overwritten, or in every central and local header of its
    members the compression method made one zipfile lacks (99), or the flag bit of encryption set."""
    if damage == "deflate":
        at = data.find(b"x_train.npy") + len("x_train.npy") + 40
        data[at:at + 50] = b"\xff" * 50
        return data
    fields = {"method": ((b"PK\x01\x02", 10), (b"PK\x03\x04", 8)),  # each header's compression method
              "encrypted": ((b"PK\x01\x02", 8), (b"PK\x03\x04", 6))}  # its general purpose flags
    for signature, field in fields[damage]:
        at = data.find(signature)
        while at >= 0:
            if damage == "method":
                data[at + field:at + field + 2] = (99).to_bytes(2, "little")
            else:
                data[at + field] |= 1
            at = data.find(signature, at + 4)
    return data


@pytest.mark.parametrize("damage, says", [("deflate", "(error: Error -3 while decompressing data"),
                                          ("method", "(NotImplementedError: That compression method is not supported)"),
                                          ("encrypted", "(RuntimeError: File <ZipInfo filename='x_train.npy'")])
def test_a_damaged_archive_is_one_line_naming_it(damage: str, says: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from p2pfl.config import make_config
    from p2pfl.data.datasets import load_dataset

    monkeypatch.setenv("P2PFL_DATA", str(tmp_path / "root"))
    np.savez_compressed(tmp_path / "x.npz", x_train=images(20), y_train=np.arange(20) % 2)
    (tmp_path / "d.npz").write_bytes(_damaged(bytearray((tmp_path / "x.npz").read_bytes()), damage))
    dataset = f"npz:{tmp_path / 'd.npz'}"
    with pytest.raises(ValueError) as refused:
        load_dataset(dataset, cfg=make_config(algorithm="fedavg", dataset=dataset, test_split=0.2))
    assert str(refused.value).startswith(f"--dataset {dataset}: is not a readable .npz file {says}"), refused.value
    assert "\n" not in str(refused.value)


# ------------------------------------------------------------------ the header readers

ARRAYS = [np.arange(12, dtype="<f4").reshape(3, 4), np.zeros((2, 0, 5), np.uint8), np.array(7, dtype=">i8"),
          np.asfortranarray(np.ones((4, 3), np.float64)), np.array(["ab", "c"]), np.arange(5, dtype=np.int16)]


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
@pytest.mark.parametrize("a", ARRAYS, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_npy_header_is_the_saved_arrays_shape_and_dtype(a: np.ndarray, version: tuple[int, int]) -> None:
    out = io.BytesIO()
    np.lib.format.write_array(out, a, version=version)
    out.seek(0)
    assert limits.npy_header(out) == (a.shape, a.dtype)
    assert len(out.getvalue()) - out.tell() == limits.array_bytes(a.shape, a.dtype) == a.nbytes  # at its data


def test_npy_header_refuses_what_is_no_npy_header() -> None:
    with pytest.raises(ValueError, match="magic"):
        limits.npy_header(io.BytesIO(b"PK\x03\x04 not an array"))
    out = io.BytesIO()
    np.lib.format.write_array(out, np.zeros(2), version=(3, 0))
    out.seek(0)
    with pytest.raises(ValueError, match=r"^\.npy format version 3\.0 is not read"):
        limits.npy_header(out)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_headers_and_load_npz_are_the_saved_arrays(save: Callable, tmp_path: Path) -> None:
    saved = {f"a{k}": a for k, a in enumerate(ARRAYS)}
    save(tmp_path / "x.npz", **saved)
    assert limits.npz_headers(tmp_path / "x.npz") == {k: (a.shape, a.dtype) for k, a in saved.items()}
    read = limits.load_npz(tmp_path / "x.npz", "x", ["a1", "a4", "absent"])
    assert list(read) == ["a1", "a4"]
    for k, a in read.items():
        assert a.dtype == saved[k].dtype and np.array_equal(a, saved[k])


def test_a_header_claiming_more_than_the_budget_is_refused_before_loading(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    np.savez(tmp_path / "x.npz", x=np.zeros(900, np.uint8), y=np.zeros(100, np.uint8))  # 1000 bytes
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "1000")
    assert set(limits.load_npz(tmp_path / "x.npz", "x")) == {"x", "y"}  # at the budget: read
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "999")
    with pytest.raises(ValueError) as refused:
        limits.load_npz(tmp_path / "x.npz", "--dataset npz:x.npz")
    assert str(refused.value) == ("--dataset npz:x.npz: its arrays (by their headers; the largest, x: shape (900,) "
                                  "of uint8): would take 1000 B, over the memory budget of 999 B (set "
                                  "P2PFL_MAX_BYTES to allow more)")
    write_zip(tmp_path / "huge.npz", {"x.npy": npy_header((10 ** 12, 32, 32, 3)) + bytes(100)})
    monkeypatch.setenv(limits.MAX_BYTES_ENV, "1e9")
    with pytest.raises(ValueError, match=r"^h: its arrays .* would take 2\.73 PiB, over the memory budget of 954 MiB"):
        limits.load_npz(tmp_path / "huge.npz", "h")


def test_a_header_claiming_more_than_its_member_holds_is_refused(tmp_path: Path) -> None:
    write_zip(tmp_path / "x.npz", {"x.npy": npy_header((10, 10), "<f8") + bytes(799)})
    with pytest.raises(ValueError, match=r"^w: array x's header declares shape \(10, 10\) of float64 \(800 B\), its "
                                         r"file holds 799 B of data$"):
        limits.load_npz(tmp_path / "x.npz", "w")
    write_zip(tmp_path / "y.npz", {"x.npy": npy_header((10, 10), "<f8") + bytes(800)})
    assert limits.load_npz(tmp_path / "y.npz", "w")["x"].shape == (10, 10)


def test_a_cache_whose_header_claims_too_much_is_ignored_and_made_again(tmp_path: Path, capsys,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.cache/p2pfl, the cache's second place
    key = "k" * 64
    (tmp_path / "parsed").mkdir()
    write_zip(tmp_path / "parsed" / f"d-{key[:32]}.npz", {"x.npy": npy_header((10 ** 12,)) + bytes(8)})
    made = cached("parsed", "d", key, lambda: {"x": np.arange(3)}, tmp_path, "--dataset d:PATH")
    assert np.array_equal(made["x"], np.arange(3))
    warning = capsys.readouterr().out
    assert warning.startswith("p2pfl: warning: --dataset d:PATH: ignored the cache") and "memory budget" in warning
    again = cached("parsed", "d", key, lambda: pytest.fail("made twice"), tmp_path, "--dataset d:PATH")
    assert np.array_equal(again["x"], np.arange(3))


def test_a_file_that_is_no_regular_file_has_no_size_to_check() -> None:
    with pytest.raises(ValueError, match=r"^--compute-trace /dev/null: not a regular file$"):
        limits.check_file_size("--compute-trace /dev/null", "/dev/null", 1 << 20)
