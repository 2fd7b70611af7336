"""Plug-ins (--plugin PATH.py | package.module | entry-points): every example under examples/plugins run with its
one line of flags on 1 and 2 ranks and as a point of one study, and the mechanism itself: errors are one line and
exit 2 on every rank, the manifest records each plug-in's digest, a plug-in's options are flags and YAML keys,
resume loads the run's own, simulate(plugins=...) and the entry-point group.

Everything that imports a plug-in runs in a subprocess: the registries of this test process stay the built-ins'.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_job

EXAMPLES = sorted((ROOT / "examples" / "plugins").glob("*.py"))
METHOD = ROOT / "examples" / "plugins" / "method.py"
QUIET = ["--no-progress", "--no-plots"]


def _flags(example: Path) -> list[str]:
    """The example's one line of flags (examples/plugins/NAME.flags)."""
    lines = [line for line in example.with_suffix(".flags").read_text().splitlines() if line.strip()]
    assert len(lines) == 1, f"{example.with_suffix('.flags')} must hold one line of flags"
    return shlex.split(lines[0])


def _as_options(flags: list[str]) -> dict[str, object]:
    """A line of flags as a study's options (--key value, --switch, --no-switch)."""
    out: dict[str, object] = {}
    i = 0
    while i < len(flags):
        key = flags[i].removeprefix("--")
        assert flags[i].startswith("--"), flags
        if "=" in key:
            key, value = key.split("=", 1)
            out[key] = value
        elif i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[key] = flags[i + 1]
            i += 1
        elif key.startswith("no-"):
            out[key[3:]] = False
        else:
            out[key] = True
        i += 1
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(run_dir: Path, example: Path) -> None:
    """The run finished and its manifest and config.yaml record the plug-in by its resolved path and digest."""
    assert (run_dir / "summary.json").is_file(), run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    path = str(example.resolve())
    assert manifest["plugins"] == [{"spec": path, "kind": "path", "path": path, "sha256": _sha256(example)}]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["plugins"] == [path]


def _run(runs_dir: Path, name: str, example: Path, ranks: int, *extra: str):
    args = ["-m", "p2pfl.run", "--plugin", str(example), *_flags(example), *extra, "--out", str(runs_dir),
            "--name", name, *QUIET]
    return run_job(args, ranks=ranks)


# ------------------------------------------------------------------ every example: 1 rank, 2 ranks, a study

def test_the_examples_have_their_flags() -> None:
    assert METHOD in EXAMPLES
    for example in EXAMPLES:
        assert example.with_suffix(".flags").is_file(), f"{example.name} has no {example.stem}.flags"
        flags = _flags(example)
        assert not {"--plugin", "--out", "--name"} & {f.split("=")[0] for f in flags}, example


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_on_one_rank(runs_dir: Path, example: Path) -> None:
    proc = _run(runs_dir, "one", example, ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _recorded(runs_dir / "one", example)


@pytest.mark.mpi
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_on_two_ranks(runs_dir: Path, example: Path) -> None:
    proc = _run(runs_dir, "two", example, ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _recorded(runs_dir / "two", example)
    assert json.loads((runs_dir / "two" / "manifest.json").read_text())["world_size"] == 2


def test_every_example_in_one_study(tmp_path: Path) -> None:
    """The study's base names every example relative to the study file's folder (so their options may be set in
    it); one listed point an example, with its line of flags: each point (a fresh interpreter: a worker that loaded
    plug-ins retires) loads them all and runs its example's component, as many points at once as --jobs 2."""
    where = tmp_path / "study"
    where.mkdir()
    relative = [os.path.relpath(example, where) for example in EXAMPLES]
    points = [{"example": {"label": example.stem, **_as_options(_flags(example))}} for example in EXAMPLES]
    (where / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": {"plugins": relative}, "points": points}))
    proc = run_job(["-m", "p2pfl.study", str(where / "s.yaml"), "--out", str(tmp_path / "out"), "--jobs", "2"],
                   ranks=0, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = sorted((tmp_path / "out" / "s" / "runs").iterdir())
    assert [r.name for r in runs] == [f"example-{e.stem}" for e in EXAMPLES]
    resolved = [str(example.resolve()) for example in EXAMPLES]
    for run, example in zip(runs, EXAMPLES):
        assert (run / "summary.json").is_file(), run
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["plugins"] == [{"spec": path, "kind": "path", "path": path, "sha256": _sha256(Path(path))}
                                       for path in resolved]
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["plugins"] == resolved
        for key, value in _as_options(_flags(example)).items():  # the point ran its own example's flags
            assert str(config[key.replace("-", "_")]).lower() == str(value).lower(), (example.stem, key)


# ------------------------------------------------------------------ the method example does what it says

def test_lazy_consensus_contracts_by_one_minus_lambda_a_round(runs_dir: Path) -> None:
    """On the complete graph with uniform weights W x is the mean, so the lazy walk (1 - λ) I + λ W leaves
    (1 - λ)^t of the distance to the mean after t rounds: the consensus distance (squared) falls by (1 - λ)^2."""
    proc = run_job(["-m", "p2pfl.run", "--plugin", str(METHOD), "--algorithm", "lazy-consensus", "--lazy-step",
                    "0.25", "--topology", "complete", "--mixing", "uniform", "--peers", "5", "--rounds", "4",
                    "--vector-size", "256", "--vector-dtype", "float64", "--out", str(runs_dir), "--name", "lazy",
                    *QUIET], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (runs_dir / "lazy" / "metrics.jsonl").read_text().splitlines()]
    cd = [r["consensus_distance"] for r in records if r["type"] == "round"]
    assert len(cd) == 5 and cd[0] > 0
    for t, value in enumerate(cd):
        assert math.isclose(value, cd[0] * 0.75 ** (2 * t), rel_tol=1e-9), (t, cd)


# ------------------------------------------------------------------ the mechanism

def _refusal(tmp_path: Path, *args: str, ranks: int = 0) -> str:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "4", "--rounds", "1",
                    "--vector-size", "8", "--out", str(tmp_path / "runs"), *QUIET, *args], ranks=ranks, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("p2pfl: error: "), lines
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before any run
    return lines[0].removeprefix("p2pfl: error: ")


def _plugin_file(tmp_path: Path, text: str, name: str = "mine.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BAD = {
    "missing file": (lambda tmp: str(tmp / "nowhere.py"), "{spec}: file not found"),
    "missing module": (lambda tmp: "no_such_package.scheme", "no_such_package.scheme: no module named "
                                                               "'no_such_package'"),
    "raising": (lambda tmp: str(_plugin_file(tmp, "raise RuntimeError('boom\\nand more')\n")),
                "{spec}: RuntimeError: boom"),
    "syntax": (lambda tmp: str(_plugin_file(tmp, "def (\n")), "{spec}: SyntaxError: "),
    "taken name": (lambda tmp: str(_plugin_file(tmp, "from p2pfl.algorithms import register_method\n"
                                                     "@register_method('consensus')\nclass Again:\n    pass\n")),
                   "{spec}: ValueError: method 'consensus' is already registered"),
    "neither": (lambda tmp: "not a module!", "not a module!: neither a file (PATH.py) nor a module name"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_plugin_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    make, expected = BAD[case]
    spec = make(tmp_path)
    line = _refusal(tmp_path, "--plugin", spec)
    assert line.startswith("--plugin " + expected.format(spec=spec)), line


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["missing file", "raising"])
def test_a_bad_plugin_is_one_line_and_exit_2_on_two_ranks(tmp_path: Path, case: str) -> None:
    make, expected = BAD[case]
    spec = make(tmp_path)
    assert _refusal(tmp_path, "--plugin", spec, ranks=2).startswith("--plugin " + expected.format(spec=spec))


@pytest.mark.mpi
def test_a_plugin_failing_on_one_rank_ends_both(tmp_path: Path) -> None:
    """The failure is agreed on like any bad input: the rank that imported it fine does not wait forever."""
    spec = _plugin_file(tmp_path, "import os\nif os.environ.get('PMI_RANK') == '1':\n"
                                  "    raise OSError('only on rank one')\n")
    assert _refusal(tmp_path, "--plugin", str(spec), ranks=2) == f"--plugin {spec}: OSError: only on rank one"


def test_plugin_options_are_flags_yaml_keys_and_in_help(tmp_path: Path) -> None:
    shown = run_job(["-m", "p2pfl.run", "--plugin", str(METHOD), "--help"], ranks=0)
    assert shown.returncode == 0 and "--lazy-step" in shown.stdout and "lazy-consensus" in shown.stdout
    assert "--plugin PATH.py|MODULE" in shown.stdout
    # a YAML file names its plug-ins relative to its own folder (key plugins: or plugin:), and sets their options
    (tmp_path / "cfg").mkdir()
    config = tmp_path / "cfg" / "run.yaml"
    config.write_text(yaml.safe_dump({"plugin": os.path.relpath(METHOD, tmp_path / "cfg"),
                                      "algorithm": "lazy-consensus", "lazy_step": 0.125}))
    printed = run_job(["-m", "p2pfl.run", "--config", str(config), "--print-config"], ranks=0, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr[-2000:]
    values = yaml.safe_load(printed.stdout)
    assert values["plugins"] == [str(METHOD)] and values["lazy_step"] == 0.125
    assert values["algorithm"] == "lazy-consensus"
    # given twice (the file and a flag, two spellings of one path): loaded and recorded once
    again = run_job(["-m", "p2pfl.run", "--config", str(config), "--plugin", os.path.relpath(METHOD, tmp_path),
                     "--print-config"], ranks=0, cwd=tmp_path)
    assert yaml.safe_load(again.stdout)["plugins"] == [str(METHOD)], again.stderr[-2000:]
    # without the plug-in its option and its method are unknown, named
    bare = run_job(["-m", "p2pfl.run", "--algorithm", "lazy-consensus", "--print-config"], ranks=0)
    assert bare.returncode == 2 and "--algorithm: unknown value 'lazy-consensus'" in bare.stderr, bare.stderr


def test_a_module_plugin_and_the_entry_point_group(tmp_path: Path) -> None:
    """--plugin package.module imports it as `import` would; --plugin entry-points loads the installed group."""
    site = tmp_path / "site"
    (site / "mypkg").mkdir(parents=True)
    (site / "mypkg" / "__init__.py").write_text("")
    (site / "mypkg" / "lazy.py").write_text(METHOD.read_text())
    dist = site / "mypkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[p2pfl.plugins]\nlazy = mypkg.lazy\n")
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{site}"}
    for spec, kind in (("mypkg.lazy", "module"), ("entry-points", "entry-point")):
        proc = run_job(["-m", "p2pfl.run", "--plugin", spec, "--algorithm", "lazy-consensus", "--peers", "3",
                        "--rounds", "1", "--vector-size", "8", "--out", str(tmp_path / "runs"), "--name", kind,
                        *QUIET], ranks=0, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        record, = json.loads((tmp_path / "runs" / kind / "manifest.json").read_text())["plugins"]
        path = site / "mypkg" / "lazy.py"
        assert record == {"spec": spec if kind == "module" else "entry-points:lazy", "kind": kind,
                          "path": str(path.resolve()), "sha256": _sha256(path)}


def test_resume_loads_the_runs_plugins_and_refuses_a_changed_one(tmp_path: Path) -> None:
    plugin = _plugin_file(tmp_path, METHOD.read_text(), "lazy.py")
    common = ["--algorithm", "lazy-consensus", "--peers", "4", "--vector-size", "16", *QUIET]
    first = run_job(["-m", "p2pfl.run", "--plugin", str(plugin), *common, "--rounds", "2", "--checkpoint-every",
                     "1", "--out", str(tmp_path / "runs"), "--name", "r"], ranks=0)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "runs" / "r"
    resumed = run_job(["-m", "p2pfl.run", *common, "--rounds", "3", "--resume", str(run_dir)], ranks=0)
    assert resumed.returncode == 0, resumed.stderr[-3000:]  # no --plugin: the run's config.yaml names it
    plugin.write_text(METHOD.read_text() + "# changed\n")
    changed = run_job(["-m", "p2pfl.run", *common, "--rounds", "4", "--resume", str(run_dir)], ranks=0)
    lines = changed.stderr.strip().splitlines()
    assert changed.returncode == 2 and len(lines) == 1, changed.stderr[-3000:]
    assert lines[0].startswith(f"p2pfl: error: --plugin {plugin}: changed since the run in {run_dir} began")


def test_simulate_takes_plugins(tmp_path: Path) -> None:
    code = (f"import p2pfl\nrun = p2pfl.simulate(plugins=[{str(METHOD)!r}], algorithm='lazy-consensus', peers=3, "
            f"rounds=2, vector_size=8, out={str(tmp_path)!r}, name='sim', progress=False, plots=False)\n"
            "print(run.summary['rounds'])\n")
    proc = run_job(["-c", code], ranks=0)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "2", proc.stderr[-3000:]
    _recorded(tmp_path / "sim", METHOD)


def test_loading_twice_is_a_no_op_and_leaves_sys_path(tmp_path: Path) -> None:
    code = ("import sys\nfrom p2pfl import plugins\npath = list(sys.path)\n"
            f"a = plugins.load([{str(METHOD)!r}])\nb = plugins.load([{os.path.relpath(METHOD, ROOT)!r}])\n"
            "assert a == b and sys.path == path\n"
            "from p2pfl import algorithms\nassert algorithms.names().count('lazy-consensus') == 1\n"
            "print(sorted(m for m in sys.modules if m.startswith('p2pfl_plugin_')))\n")
    proc = run_job(["-c", code], ranks=0, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().count("p2pfl_plugin_method_") == 1, proc.stdout


def test_isolated_forgets_what_the_plugins_inside_registered() -> None:
    """Inside `isolated()` a plug-in's method, option and module exist; after it, none does, and loading the
    file again registers it afresh (its module runs again)."""
    import sys

    from p2pfl import algorithms, plugins
    from p2pfl.config import ConfigError, make_config, options
    from p2pfl.plugin_scope import isolated

    def present() -> tuple[bool, bool, bool]:
        return ("lazy-consensus" in algorithms.names(), "lazy_step" in {f.name for f in options()},
                plugins.module_name(str(METHOD)) in sys.modules)

    with isolated():
        assert present() == (False, False, False)
        plugins.load([str(METHOD)])
        assert present() == (True, True, True)
        assert make_config(algorithm="lazy-consensus", lazy_step=0.25).lazy_step == 0.25
    assert present() == (False, False, False)
    with pytest.raises(ConfigError, match="--algorithm"):
        make_config(algorithm="lazy-consensus")
    with isolated():
        plugins.load([str(METHOD)])
        assert present() == (True, True, True)
