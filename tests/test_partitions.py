"""The partitions as registered components: shard, pathological, inner-dirichlet and quantity against computations
written here from their definitions (the seeded draws redone by hand), every partition a disjoint set of indices
and a pure function of its seed, their options as flags, their manifest records, and a `--partition shard` run on
2 ranks equal to the 1-rank run, drawn in the partition heat map."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from p2pfl.config import ConfigError, make_config
from p2pfl.data.partitions import PARTITIONS, PartitionError, class_counts, partition, record
from p2pfl.seeding import SHARED, numpy_rng

from conftest import run_job, timing_free_records

BUILT_INS = ("dirichlet", "iid", "inner-dirichlet", "one-class", "pathological", "quantity", "shard", "skew")
#: The built-ins that split by the data's natural groups, not by labels (tested in tests/test_leaf.py).
GROUPED = ("natural",)


def labels(per_class: list[int], seed: int = 0) -> np.ndarray:
    """Shuffled labels with `per_class[c]` samples of class c."""
    y = np.repeat(np.arange(len(per_class)), per_class)
    return np.random.default_rng(seed).permutation(y)


def assert_disjoint(parts: list[np.ndarray], n: int, cover: bool = True) -> None:
    joined = np.concatenate(parts)
    assert np.unique(joined).size == joined.size, "an index given twice"
    assert joined.min() >= 0 and joined.max() < n
    if cover:
        assert joined.size == n


def test_the_registry_holds_the_built_ins() -> None:
    assert tuple(PARTITIONS.names()) == tuple(sorted(BUILT_INS + GROUPED))
    assert PARTITIONS.resolve("oneclass") == "one-class"


@pytest.mark.parametrize("kind", BUILT_INS)
def test_every_partition_is_disjoint_and_a_function_of_its_seed(kind: str) -> None:
    y = labels([60] * 10)
    a = partition(y, 10, kind, seed=5)
    assert len(a) == 10 and all(p.dtype == np.int64 and p.size for p in a)
    assert_disjoint(a, y.size, cover=kind != "skew")
    again = partition(y, 10, kind, seed=5)
    assert all(np.array_equal(p, q) for p, q in zip(a, again))
    other = partition(y, 10, kind, seed=6)
    assert any(not np.array_equal(p, q) for p, q in zip(a, other))


# ------------------------------------------------------------------------------------------------ shard

def shard_counts(y: np.ndarray, k: int, s: int, seed: int, c: int) -> np.ndarray:
    """Peers x classes counts by the definition: S = k·s equal (±1) cuts of the sorted labels, dealt by a seeded
    permutation of the shards (the scheme's first draw)."""
    ordered = np.sort(y)
    bounds = np.cumsum([0] + [len(range(i, y.size, k * s)) for i in range(k * s)])  # array_split's sizes
    order = numpy_rng(seed, SHARED, "partition").permutation(k * s)
    counts = np.zeros((k, c), dtype=np.int64)
    for peer in range(k):
        for j in order[peer * s:(peer + 1) * s]:
            counts[peer] += np.bincount(ordered[bounds[j]:bounds[j + 1]], minlength=c)
    return counts


@pytest.mark.parametrize("per_class, k, s", [([60] * 10, 10, 2), ([60] * 10, 5, 4), ([37, 80, 11, 52, 70], 6, 3)])
def test_shard_class_counts_are_exact(per_class: list[int], k: int, s: int) -> None:
    y = labels(per_class, seed=1)
    parts = partition(y, k, "shard", seed=9, shards_per_peer=s)
    assert_disjoint(parts, y.size)
    counts = class_counts(parts, y, len(per_class))
    assert np.array_equal(counts, shard_counts(y, k, s, 9, len(per_class)))
    assert np.array_equal(counts.sum(0), per_class)


def test_shard_of_whole_class_shards_gives_each_peer_at_most_s_classes() -> None:
    y = labels([60] * 10)
    counts = class_counts(partition(y, 10, "shard", seed=2, shards_per_peer=2), y, 10)
    assert ((counts > 0).sum(1) <= 2).all() and set(np.unique(counts)) <= {0, 30, 60}  # shards of 30
    with pytest.raises(PartitionError, match="cannot make 10x2 = 20 shards"):
        partition(labels([1] * 10), 10, "shard", seed=0)


# ------------------------------------------------------------------------------------------------ pathological

@pytest.mark.parametrize("k, per_peer", [(7, 3), (10, 2), (4, 5), (3, 2)])
def test_pathological_gives_exactly_k_classes_split_equally(k: int, per_peer: int) -> None:
    c = 10
    per_class = [30 + 7 * cls for cls in range(c)]
    y = labels(per_class, seed=3)
    parts = partition(y, k, "pathological", seed=4, classes_per_peer=per_peer)
    counts = class_counts(parts, y, c)
    order = numpy_rng(4, SHARED, "partition").permutation(c)  # the scheme's first draw: the class order
    held = [{int(order[(i * per_peer + j) % c]) for j in range(per_peer)} for i in range(k)]
    for peer in range(k):
        assert set(np.flatnonzero(counts[peer])) == held[peer] and len(held[peer]) == per_peer
    holders = [[peer for peer in range(k) if cls in held[peer]] for cls in range(c)]
    for cls in range(c):
        got = counts[holders[cls], cls]
        assert got.sum() == (per_class[cls] if holders[cls] else 0)  # a held class entirely, an unheld one not
        if holders[cls]:
            assert got.max() - got.min() <= 1
        assert len(holders[cls]) in (k * per_peer // c, -(-k * per_peer // c))
    assert_disjoint(parts, y.size, cover=k * per_peer >= c)


def test_pathological_refuses_more_classes_than_there_are() -> None:
    with pytest.raises(PartitionError, match=r"classes_per_peer must lie in \[1, 10\]"):
        partition(labels([20] * 10), 4, "pathological", seed=0, classes_per_peer=11)


# ------------------------------------------------------------------------------------------------ sizes

def remainder_sizes(n: int, weights: list[Fraction]) -> list[int]:
    """Largest-remainder rounding in exact arithmetic: floors, then one each to the largest fractional parts."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    sizes = [int(e) for e in exact]
    for i in sorted(range(len(weights)), key=lambda i: (-(exact[i] - sizes[i]), i))[:n - sum(sizes)]:
        sizes[i] += 1
    return sizes


@pytest.mark.parametrize("n, k, exponent", [(1000, 7, 1), (997, 10, 2), (500, 4, 0)])
def test_quantity_sizes_follow_the_power_law_rounding(n: int, k: int, exponent: int) -> None:
    y = labels([n // 5] * 4 + [n - 4 * (n // 5)])
    parts = partition(y, k, "quantity", seed=8, quantity_exponent=float(exponent))
    assert_disjoint(parts, n)
    want = remainder_sizes(n, [Fraction(1, (r + 1) ** exponent) for r in range(k)])
    assert sorted((p.size for p in parts), reverse=True) == sorted(want, reverse=True)
    dealt = numpy_rng(8, SHARED, "partition").permutation(k)  # the first draw: which rank each peer gets
    assert [p.size for p in parts] == [want[r] for r in dealt]


def test_quantity_sizes_from_a_list() -> None:
    y = labels([25] * 4)
    assert [p.size for p in partition(y, 3, "quantity", seed=0, quantity_sizes="5,3,2")] == [50, 30, 20]
    assert [p.size for p in partition(y, 3, "quantity", seed=0, quantity_sizes="1,1,1")] == [34, 33, 33]
    assert [p.size for p in partition(y, 3, "quantity", seed=0, quantity_sizes="70,20,10")] == [70, 20, 10]
    with pytest.raises(PartitionError, match="lists 2 sizes for 3 peers"):
        partition(y, 3, "quantity", seed=0, quantity_sizes="1,2")


def test_inner_dirichlet_sizes_are_exact() -> None:
    y = labels([90, 40, 70, 100, 30, 70])
    equal = partition(y, 7, "inner-dirichlet", seed=1, alpha=0.3)
    assert_disjoint(equal, y.size)
    assert [p.size for p in equal] == [len(range(i, y.size, 7)) for i in range(7)]
    listed = partition(y, 4, "inner-dirichlet", seed=1, alpha=0.3, inner_sizes="quantity", quantity_sizes="1,2,3,4")
    assert_disjoint(listed, y.size)
    assert [p.size for p in listed] == remainder_sizes(y.size, [Fraction(w) for w in (1, 2, 3, 4)])


def test_inner_dirichlet_concentrates_as_alpha_falls() -> None:
    y = labels([200] * 10)

    def top_share(alpha: float) -> float:
        counts = class_counts(partition(y, 10, "inner-dirichlet", seed=3, alpha=alpha), y, 10)
        return float((counts.max(1) / counts.sum(1)).mean())

    concentrated, spread = top_share(0.05), top_share(100.0)
    assert concentrated > 0.4 and spread < 0.2 and concentrated > 2 * spread


# ------------------------------------------------------------------------------------------------ configuration

def test_partition_options_are_flags_with_ranges_and_checks() -> None:
    cfg = make_config(partition="shard", shards_per_peer=3)
    assert (cfg.partition, cfg.shards_per_peer, cfg.alpha, cfg.beta, cfg.min_size) == ("shard", 3, 0.1, 0.5, 10)
    with pytest.raises(ConfigError, match=r"^--shards-per-peer: must be >= 1, got 0$"):
        make_config(shards_per_peer=0)
    with pytest.raises(ConfigError, match=r"^--classes-per-peer: must be >= 1"):
        make_config(classes_per_peer=0)
    with pytest.raises(ConfigError, match=r"^--inner-sizes: unknown value 'big'"):
        make_config(inner_sizes="big")
    with pytest.raises(ConfigError, match=r"^--quantity-sizes: expected positive numbers separated by commas"):
        make_config(partition="quantity", quantity_sizes="3,-1")
    with pytest.raises(ConfigError, match=r"^--quantity-sizes: lists 2 sizes for --peers 4$"):
        make_config(partition="quantity", quantity_sizes="3,1", peers=4)
    make_config(partition="iid", quantity_sizes="3,1", peers=4)  # only the selected partition's rules run


def test_record_holds_the_partitions_parameters_and_label() -> None:
    shard = record(make_config(partition="shard", shards_per_peer=3))
    assert shard["parameters"] == {"shards_per_peer": 3} and shard["label"] == "shard(shards_per_peer=3)"
    dirichlet = record(make_config(partition="dirichlet", alpha=0.5))
    assert dirichlet["label"] == "dirichlet(alpha=0.5)" and dirichlet["parameters"]["min_size"] == 10
    quantity = record(make_config(partition="quantity", quantity_sizes="1,2", peers=2))
    assert quantity["label"] == "quantity(quantity_sizes=1,2)"
    assert record(make_config(partition="iid"))["label"] == "iid"


@pytest.mark.mpi
def test_a_shard_run_on_two_ranks_equals_one_rank_and_is_recorded_and_drawn(runs_dir: Path) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "synthetic", "--train-subset", "96",
            "--partition", "shard", "--shards-per-peer", "3", "--peers", "4", "--rounds", "2", "--local-steps", "1",
            "--batch-size", "8", "--eval-every", "1", "--seed", "2", "--no-progress", "--no-plots",
            "--batch-peers", "off", "--out", str(runs_dir)]  # peer by peer: compared bit for bit across layouts
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*args, "--name", name], ranks=ranks, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert timing_free_records(runs_dir / "two") == timing_free_records(runs_dir / "one")
    part = json.loads((runs_dir / "one" / "manifest.json").read_text())["partition"]
    assert (part["kind"], part["parameters"], part["label"]) == ("shard", {"shards_per_peer": 3},
                                                                  "shard(shards_per_peer=3)")
    counts = np.asarray(part["class_counts"])
    assert counts.sum() == 96 and list(counts.sum(1)) == part["sizes"]
    assert ((counts > 0).sum(1) <= 2 * 3).all()  # s shards, each spanning at most two classes of 96/12-sample shards

    from analysis.plots import plot_partition
    from analysis.runs import load_run

    run = load_run(runs_dir / "one")
    assert run.partition_label == "shard(shards_per_peer=3)"
    assert plot_partition(run, runs_dir / "plots") == runs_dir / "plots" / "partition.png"
    assert (runs_dir / "plots" / "partition.png").stat().st_size > 0
