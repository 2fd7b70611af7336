"""Names (issue 56, item 7): `ring` is the cycle under another name (the same graph, W and records; recorded as
cycle, so a --resume of either matches the other); the torus and the 2-D grid against their closed forms and a
construction of their own here; "did you mean" at every site that refuses a name."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
import yaml

import p2pfl
import topologies
from p2pfl.cli import parse_args
from p2pfl.cli_help import render
from p2pfl.config import ConfigError, load_yaml, make_config, resolve
from p2pfl.data.datasets import canonical_name
from p2pfl.study.plan import StudyError, check_points, expand
from p2pfl.suggest import closest, option_hint

from conftest import run_job, timing_free_records

CONSENSUS = ["--algorithm", "consensus", "--peers", "6", "--rounds", "2", "--vector-size", "50", "--no-progress",
             "--no-plots"]
SEE = "(see python -m p2pfl.run --help)"


def _run(out: Path, name: str, *args: str) -> Path:
    proc = run_job(["-m", "p2pfl.run", *CONSENSUS, "--out", str(out), "--name", name, *args], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / name


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


# ------------------------------------------------------------------ ring: the cycle by another name

@pytest.fixture(scope="module")
def ring_and_cycle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("names")
    return (_run(out, "ring", "--topology", "ring", "--checkpoint-every", "1"),
            _run(out, "cycle", "--topology", "cycle", "--checkpoint-every", "1"))


def test_ring_runs_as_the_cycle_bit_for_bit(ring_and_cycle: tuple[Path, Path]) -> None:
    ring, cycle = ring_and_cycle
    by_ring, by_cycle = _manifest(ring), _manifest(cycle)
    assert by_ring["topology"]["edges"] == by_cycle["topology"]["edges"] == [[0, 1], [0, 5], [1, 2], [2, 3], [3, 4],
                                                                            [4, 5]]
    assert by_ring["topology"]["weights"] == by_cycle["topology"]["weights"]  # W, entry for entry
    assert by_ring["config"]["topology"] == by_cycle["config"]["topology"] == "cycle"  # the name recorded
    assert yaml.safe_load((ring / "config.yaml").read_text())["topology"] == "cycle"
    records = timing_free_records(ring)
    assert [r["round"] for r in records if r["type"] == "round"] == [0, 1, 2]
    assert records == timing_free_records(cycle)


@pytest.mark.parametrize(("made_by", "resumed_as"), [(0, "cycle"), (1, "ring")], ids=["ring-as-cycle", "cycle-as-ring"])
def test_a_resume_by_either_name_matches_the_run(ring_and_cycle: tuple[Path, Path], made_by: int,
                                                 resumed_as: str) -> None:
    run = ring_and_cycle[made_by]
    options = {"algorithm": "consensus", "peers": 6, "vector_size": 50, "resume": str(run)}
    assert resolve(make_config(**options, topology=resumed_as), 1).cfg.topology == "cycle"
    with pytest.raises(ConfigError, match=r"differs from the run's own options: --topology cycle \(run\) vs star"):
        resolve(make_config(**options, topology="star"), 1)


def test_ring_is_accepted_by_every_way_of_giving_options(tmp_path: Path) -> None:
    assert topologies.build("ring", 7).edges == topologies.build("cycle", 7).edges
    assert topologies.build("Ring", 7).graph["topology"] == "cycle"
    options = tmp_path / "options.yaml"
    options.write_text("algorithm: consensus\ntopology: ring\n")
    assert make_config(**load_yaml(str(options))).topology == "cycle"
    plan = expand({"base": {"algorithm": "consensus", "peers": 4}, "axes": {"topology": ["ring", "star"]}})
    check_points(plan, 1)
    assert [p.options["topology"] for p in plan.points] == ["ring", "star"]  # as written; each run records cycle
    assert make_config(algorithm="consensus", topology="RING").topology == "cycle"
    assert make_config(algorithm="consensus", topology="binary_tree").topology == "binary-tree"


def test_help_shows_the_alias_beside_its_name() -> None:
    line = next(x for x in render(None, {}).splitlines() if x.strip().startswith("--topology "))
    assert "cycle (ring)" in line and ",torus," in line and ",grid," in line
    assert "ring," not in line.replace("cycle (ring)", "")  # not a name of its own


def test_an_alias_taken_twice_is_refused() -> None:
    with pytest.raises(topologies.TopologyError, match="alias 'ring' is already"):
        topologies.register("my-ring", aliases=("ring",))(lambda n, seed=0: nx.cycle_graph(n))
    with pytest.raises(topologies.TopologyError, match="'ring' is already registered"):
        topologies.register("ring")(lambda n, seed=0: nx.cycle_graph(n))
    assert "my-ring" not in topologies.registry and topologies.base.ALIASES["ring"] == "cycle"


# ------------------------------------------------------------------ torus and grid

def torus_neighbours(rows: int, cols: int) -> dict[int, set[int]]:
    """Peer r·cols + c's neighbours by index arithmetic: the 4 around it, wrapping (a side of 2 meets itself)."""
    return {r * cols + c: {((r + dr) % rows) * cols + (c + dc) % cols for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))}
            for r in range(rows) for c in range(cols)}


def grid_neighbours(rows: int, cols: int) -> dict[int, set[int]]:
    """Peer r·cols + c's neighbours among the 4 around it that lie inside the grid."""
    return {r * cols + c: {(r + dr) * cols + c + dc for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))
                           if 0 <= r + dr < rows and 0 <= c + dc < cols}
            for r in range(rows) for c in range(cols)}


def neighbours(graph: nx.Graph) -> dict[int, set[int]]:
    return {i: set(graph[i]) for i in graph.nodes}


SIDES = [(3, 3), (3, 4), (4, 3), (4, 4), (3, 7), (5, 6), (2, 2), (2, 5), (5, 2)]


@pytest.mark.parametrize(("rows", "cols"), SIDES)
def test_the_torus_is_two_cycles_multiplied(rows: int, cols: int) -> None:
    n = rows * cols
    g = topologies.build("torus", n, rows=rows)
    assert neighbours(g) == torus_neighbours(rows, cols) and nx.is_connected(g)
    if rows >= 3 and cols >= 3:
        assert {d for _, d in g.degree} == {4} and g.number_of_edges() == 2 * n
    else:  # a side of 2: its two links between the same peers are one link
        degree = 2 + (rows > 2) + (cols > 2)
        assert {d for _, d in g.degree} == {degree} and g.number_of_edges() == n * degree // 2
    assert nx.is_isomorphic(g, nx.cartesian_product(nx.cycle_graph(rows), nx.cycle_graph(cols)))


@pytest.mark.parametrize(("rows", "cols"), SIDES)
def test_the_grid_has_no_wrap_around(rows: int, cols: int) -> None:
    n = rows * cols
    g = topologies.build("grid", n, rows=rows)
    assert neighbours(g) == grid_neighbours(rows, cols) and nx.is_connected(g)
    for i, d in g.degree:
        r, c = divmod(i, cols)
        assert d == 4 - (r in (0, rows - 1)) - (c in (0, cols - 1))  # 2 at corners, 3 on edges, 4 inside
    assert g.number_of_edges() == 2 * rows * cols - rows - cols


@pytest.mark.parametrize(("n", "rows"), [(12, 3), (16, 4), (20, 4), (36, 6), (18, 3), (4, 2)])
def test_without_rows_the_grid_is_the_most_square(n: int, rows: int) -> None:
    assert neighbours(topologies.build("torus", n)) == torus_neighbours(rows, n // rows)
    assert neighbours(topologies.build("grid", n)) == grid_neighbours(rows, n // rows)


@pytest.mark.parametrize("name", ["torus", "grid"])
@pytest.mark.parametrize(("n", "rows", "says"), [
    (16, 5, "--rows 5 does not divide --peers 16 (R rows of K/R peers)"),
    (16, 1, "--rows 1 on --peers 16 leaves a side under 2"),
    (16, 16, "--rows 16 on --peers 16 leaves a side under 2"),
    (16, 0, "--rows must be an integer >= 2, got 0"),
    (16, "4", "--rows must be an integer >= 2, got '4'"),
    (7, None, "--peers 7 is no product R x C with R, C >= 2"),
])
def test_a_grid_that_is_not_one_is_refused(name: str, n: int, rows: object, says: str) -> None:
    with pytest.raises(topologies.TopologyError) as raised:
        topologies.build(name, n, rows=rows)
    assert str(raised.value).startswith(f"topology {name!r}: {says}")


def test_a_torus_run_of_4_rows(tmp_path: Path) -> None:
    run = _run(tmp_path, "torus", "--peers", "16", "--topology", "torus", "--rows", "4")
    manifest = _manifest(run)
    assert manifest["config"]["topology"] == "torus" and manifest["config"]["rows"] == 4
    assert sorted(map(tuple, manifest["topology"]["edges"])) == sorted(
        (i, j) for i, near in torus_neighbours(4, 4).items() for j in near if i < j)
    weights = manifest["topology"]["weights"]  # 4-regular: 1/5 on each peer's closed neighbourhood
    assert len(weights) == 16 * 5 and all(w == pytest.approx(0.2, abs=1e-15) for _, _, w in weights)
    assert [r["round"] for r in timing_free_records(run) if r["type"] == "round"] == [0, 1, 2]


def test_rows_that_do_not_divide_the_peers_are_refused_in_one_line(tmp_path: Path) -> None:
    proc = run_job(["-m", "p2pfl.run", *CONSENSUS, "--peers", "16", "--topology", "torus", "--rows", "5", "--out",
                    str(tmp_path)], ranks=0)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "p2pfl: error: topology 'torus': --rows 5 does not divide --peers 16 (R rows of K/R peers)"]


def test_rows_on_another_topology_is_warned_of_as_ignored() -> None:
    cfg, _ = parse_args(["--algorithm", "consensus", "--topology", "ring", "--rows", "4"])
    assert cfg.ignored == ("--rows is ignored: it is a parameter of topology grid, torus, and --topology cycle does "
                           "not take it",)


# ------------------------------------------------------------------ did you mean

def _refused(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_args(["--algorithm", "consensus", *argv])
    return str(raised.value)


@pytest.mark.parametrize(("argv", "line"), [
    (["--round", "5"], f"--round: unknown option; did you mean --rounds? {SEE}"),
    (["--round=5"], f"--round: unknown option; did you mean --rounds? {SEE}"),
    (["--learning-rate", "0.1"], f"--learning-rate: unknown option; did you mean --lr? {SEE}"),
    (["--clients", "8"], f"--clients: unknown option; did you mean --peers? {SEE}"),
    (["--epochs", "2"], f"--epochs: unknown option; did you mean --local-epochs? {SEE}"),
    (["--no-progres"], f"--no-progres: unknown option; did you mean --no-progress? {SEE}"),
    (["--frobnicate", "2"], f"--frobnicate: unknown option {SEE}"),  # nothing close: nothing suggested
])
def test_an_unknown_flag_names_the_closest(argv: list[str], line: str) -> None:
    assert _refused(argv) == line


def test_an_unknown_yaml_key_names_the_closest(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    for key, after in [("round", f"; did you mean rounds? {SEE}"), ("learning-rate", f"; did you mean lr? {SEE}"),
                       ("colour", f" {SEE}")]:
        path.write_text(f"algorithm: consensus\n{key}: 5\n")
        with pytest.raises(ConfigError) as raised:
            parse_args(["--config", str(path)])
        assert str(raised.value) == f"--config: unknown key '{key}' in {path}{after}"


def test_an_unknown_topology_suggests_first_and_keeps_the_list() -> None:
    message = _refused(["--topology", "rign"])
    assert message.startswith("--topology: unknown value 'rign'; did you mean ring? allowed: binary-tree, chain, ")
    assert "cycle (ring)" in message and message.endswith(", file")
    assert _refused(["--topology", "toruss"]).startswith("--topology: unknown value 'toruss'; did you mean torus? ")
    assert _refused(["--topology", "moebius"]).startswith("--topology: unknown value 'moebius'; allowed: ")


def test_a_data_file_without_its_format_names_the_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "digits.npz").write_bytes(b"")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("a,label\n1,0\n")
    assert _refused(["--dataset", "digits.npz"]).startswith(
        "--dataset: unknown value 'digits.npz'; did you mean npz:digits.npz? allowed: cifar10, ")
    assert _refused(["--dataset", "./data/x.csv"]).startswith(
        "--dataset: unknown value './data/x.csv'; did you mean csv:./data/x.csv? allowed: ")
    assert _refused(["--dataset", "missing.npz"]).startswith("--dataset: unknown value 'missing.npz'; allowed: ")
    assert _refused(["--dataset", "data"]).startswith("--dataset: unknown value 'data'; allowed: ")  # a folder: which?
    with pytest.raises(ValueError, match=r"^unknown dataset 'digits.npz'; did you mean npz:digits.npz\? choose one"):
        canonical_name("digits.npz")


@pytest.mark.parametrize(("study", "line"), [
    ({"base": {"algorithm": "consensus", "round": 3}},
     f"base: unknown option 'round'; did you mean rounds? {SEE}"),
    ({"base": {"algorithm": "consensus"}, "axes": {"learning_rate": [0.1]}},
     "axes.learning_rate: not a p2pfl.run option; did you mean lr? a named axis takes mappings of options "
     "({label: ..., option: value, ...})"),
    ({"base": {"algorithm": "consensus"}, "axes": {"data": [{"partition": "iid", "num_clients": 4}]}},
     f"axes.data: unknown option 'num_clients'; did you mean peers? {SEE}"),
    ({"base": {"algorithm": "consensus"}, "axis": {"seed": [0]}},
     "unknown key 'axis'; did you mean axes? (allowed: name, base, axes, points, seeds, slurm, tune)"),
    ({"base": {"algorithm": "consensus"}, "axes": {"seed": [0]}, "tune": {"grid": {"learning-rate": [0.1]}}},
     f"tune.grid.learning-rate: not a p2pfl.run option; did you mean lr? {SEE}"),
    ({"base": {"algorithm": "consensus"}, "axes": {"seed": [0]}, "tune": {"grid": {"lr": [0.1]}, "seed": [1]}},
     "tune.seed: unknown key; did you mean seeds? (allowed: grid, seeds, validation, metric, goal, per)"),
])
def test_a_study_file_names_the_closest(study: dict, line: str) -> None:
    with pytest.raises(StudyError) as raised:
        expand(study)
    assert str(raised.value) == line


def test_simulate_names_the_closest_keyword(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        p2pfl.simulate(algorithm="consensus", peers=4, learning_rate=0.1, out=str(tmp_path))
    assert str(raised.value) == f"--learning-rate: unknown option; did you mean --lr? {SEE}"  # the CLI's line
    assert not any(tmp_path.iterdir())


def test_a_synonym_is_suggested_only_where_its_option_exists() -> None:
    assert closest("learning_rate", ["lr", "local_lr"], synonyms=True) == "lr"
    assert closest("learning_rate", ["rounds"], synonyms=True) is None
    assert closest("learning_rate", ["lr"]) is None  # difflib alone does not find it
    assert option_hint("--Num-Clients", ["--peers", "--rounds"]) == "; did you mean --peers?"
