"""The one cache of arrays made from files (p2pfl.data.datasets._files.cached) as the parsed formats use it (csv:,
leaf:, femnist:, sent140:, hf:, hf-table:, hf-text:; folder:'s decoding in test_dataset_formats): a second read gives
what the first gave without parsing, a changed file (same size, same modification time) is parsed again, and a cache
that is corrupt, truncated, pickled or another's is ignored with one warning line and rewritten, never trusted."""
from __future__ import annotations

import csv
import os
import pathlib
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from test_leaf import _leaf, _write
from test_leaf_formats import femnist_set, sent140_set

from p2pfl.config import make_config
from p2pfl.data.datasets import DATASETS, ImageDataset, load_dataset

pytestmark = pytest.mark.usefixtures("own_cache")


def _femnist(root: Path) -> tuple[str, dict]:
    return f"femnist:{femnist_set(root / 'femnist', users=3, per_user=8)}", {}


def _shakespeare(root: Path) -> tuple[str, dict]:
    _write(root / "s" / "train" / "a.json", _leaf({"ann": (["to be", "or no"], ["!", "t"]), "bob": (["that "], ["i"])}))
    _write(root / "s" / "test" / "a.json", _leaf({"cy": (["hello"], ["?"])}))
    return f"leaf:{root / 's'}", {"model": "char-lstm"}


def _sent140(root: Path) -> tuple[str, dict]:
    return f"sent140:{sent140_set(root / 'tweets', users=3, per_user=6)}", {"model": "char-lstm", "max_length": 24}


def _csv(root: Path) -> tuple[str, dict]:
    rng = np.random.default_rng(0)
    with open(root / "t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "colour", "label"])
        w.writerows([[repr(float(rng.normal())), ["red", "blue"][i % 2], i % 3] for i in range(20)])
    return f"csv:{root / 't.csv'}", {"model": "mlp", "test_split": 0.25}


def _hf(kind: str) -> Callable[[Path], tuple[str, dict]]:
    def build(root: Path) -> tuple[str, dict]:
        datasets = pytest.importorskip("datasets", reason="--dataset hf: needs the datasets package")
        rng = np.random.default_rng(1)
        if kind == "hf":
            features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
            split = datasets.Dataset.from_dict({"img": list(rng.integers(0, 256, (8, 6, 6, 3), dtype=np.uint8)),
                                                "label": [i % 2 for i in range(8)]}, features=features)
            datasets.DatasetDict(train=split, test=split).save_to_disk(str(root / "hf"))
            return f"hf:{root / 'hf'}", {"image_size": 6}
        if kind == "hf-table":
            table = {"w": rng.normal(size=12).tolist(), "c": ["x", "y", "z"] * 4, "label": [0, 1] * 6}
            datasets.Dataset.from_dict(table).save_to_disk(str(root / "table"))
            return f"hf-table:{root / 'table'}", {"model": "mlp", "test_split": 0.25}
        datasets.Dataset.from_dict({"text": ["abcd", "bcda", "cdab", "dabc"]}).save_to_disk(str(root / "texts"))
        return f"hf-text:{root / 'texts'}", {"model": "char-lstm", "test_split": 0.25}
    return build


FORMATS = {"femnist": _femnist, "leaf": _shakespeare, "sent140": _sent140, "csv": _csv, "hf": _hf("hf"),
           "hf-table": _hf("hf-table"), "hf-text": _hf("hf-text")}


def _load(dataset: str, options: dict) -> ImageDataset:
    return load_dataset(dataset, cfg=make_config(algorithm="fedavg", dataset=dataset, **options))


def _same(a: ImageDataset, b: ImageDataset) -> None:
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert getattr(a, name).dtype == getattr(b, name).dtype and torch.equal(getattr(a, name), getattr(b, name))
    assert (a.groups is None) == (b.groups is None) and (a.groups is None or torch.equal(a.groups, b.groups))
    assert (a.num_classes, a.classes, a.mean, a.std, a.vocabulary, a.padding, a.transform) == (
        b.num_classes, b.classes, b.mean, b.std, b.vocabulary, b.padding, b.transform)
    assert a.extra == b.extra


def _no_parsing(monkeypatch: pytest.MonkeyPatch, dataset: str) -> None:
    """Parsing `dataset`'s files fails the test from now on."""
    cls = DATASETS.get(dataset)
    monkeypatch.setattr(cls, "parse", lambda self: pytest.fail(f"{dataset} parsed again"))


def _caches(root: Path) -> list[Path]:
    return sorted((root / "parsed").glob("*.npz"))


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_a_second_read_gives_the_first_without_parsing(tmp_path: Path, own_cache: Path, kind: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    dataset, options = FORMATS[kind](tmp_path)
    first = _load(dataset, options)
    assert len(_caches(own_cache)) == 1
    _no_parsing(monkeypatch, dataset)
    _same(_load(dataset, options), first)


def test_the_options_the_arrays_depend_on_key_the_cache(tmp_path: Path, own_cache: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another --test-split is parsed anew into a cache of its own; --no-flip, which acts on training batches only,
    reads the same cache."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (8, 28, 28)).astype(np.uint8), rng.integers(0, 62, 8)
    path = _write(tmp_path / "all.json", _leaf({"w": ([(im.reshape(-1) / 255).tolist() for im in x], y.tolist())}))
    quarter = _load(f"femnist:{path}", {"test_split": 0.25})
    half = _load(f"femnist:{path}", {"test_split": 0.5})
    assert (len(quarter.y_test), len(half.y_test)) == (2, 4) and len(_caches(own_cache)) == 2
    _no_parsing(monkeypatch, f"femnist:{path}")
    unmirrored = _load(f"femnist:{path}", {"test_split": 0.25, "flip": False})
    _same(unmirrored, quarter)


def test_femnist_is_not_parsed_as_json_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON parser itself is not called on the second read (every rank of a run reads the node's cache)."""
    from p2pfl.data.datasets import _leaf

    dataset, options = _femnist(tmp_path)
    first = _load(dataset, options)
    monkeypatch.setattr(_leaf, "json", types.SimpleNamespace(loads=lambda *a, **k: pytest.fail("JSON parsed")))
    _same(_load(dataset, options), first)


def test_a_changed_file_is_parsed_again_even_with_its_size_and_time(tmp_path: Path, own_cache: Path) -> None:
    """The key holds the files' bytes: a file rewritten with as many bytes and its modification time put back (a
    rewrite within the file system's timestamp granularity) is parsed again."""
    dataset, options = _shakespeare(tmp_path)
    first = _load(dataset, options)
    path = tmp_path / "s" / "test" / "a.json"
    stat = path.stat()
    text = path.read_text()
    path.write_text(text.replace("hello", "jello"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    again = _load(dataset, options)
    assert again.extra["digest"] != first.extra["digest"] and len(_caches(own_cache)) == 2
    unknown = len(again.classes) - 1  # 'h' is a training character, 'j' none
    assert first.x_test[0, 0] != unknown and again.x_test[0, 0] == unknown
    assert again.extra["unknown_test_characters"] == first.extra["unknown_test_characters"] + 1


class _Touch:
    """An object whose unpickling would create a file: what a cache must never run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


def _corrupt(path: Path, how: str, marker: Path) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(b"not an npz at all")
    elif how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif how == "flipped-bytes":  # the zip's CRC catches a changed byte of an array
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:])
    elif how == "pickled":
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["x_train"] = np.array([_Touch(marker)], dtype=object)
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    else:  # another key: a whole, readable cache, not this one
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["__cache_key__"] = np.array("0" * 64)
        with open(path, "wb") as f:
            np.savez(f, **arrays)


@pytest.mark.parametrize("how", ["garbage", "truncated", "flipped-bytes", "pickled", "another-key"])
def test_a_corrupt_cache_is_ignored_with_one_warning_and_rewritten(tmp_path: Path, own_cache: Path, how: str,
                                                                   capsys: pytest.CaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    dataset, options = _femnist(tmp_path)
    first = _load(dataset, options)
    (cache,) = _caches(own_cache)
    marker = tmp_path / "unpickled"
    _corrupt(cache, how, marker)
    capsys.readouterr()
    _same(_load(dataset, options), first)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"p2pfl: warning: --dataset {dataset}: ignored the cache "
                                                   f"{cache}, unreadable ("), lines
    assert not marker.exists()
    with monkeypatch.context() as patched:  # rewritten whole: the next read takes it, silently
        _no_parsing(patched, dataset)
        _same(_load(dataset, options), first)
    assert capsys.readouterr().out == "" and _caches(own_cache) == [cache]
