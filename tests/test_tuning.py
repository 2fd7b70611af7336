"""Tuned arms in studies (p2pfl.study.tune): the tuner chooses on data held out of the training set and never
reads the test set, the choice is the argmax of the recorded held-out scores, tuning points resume like any point,
and the held-out split is a stratified, seeded draw that leaves the training data."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from p2pfl.data.datasets import load_dataset
from p2pfl.data.validation import held_out
from p2pfl.study.plan import StudyError, expand
from p2pfl.study.tune import TuneError, TuneSpec, TuningRun, choose, score_of

from conftest import ROOT

BASE = {"algorithm": "fedavg", "model": "mlp", "train_subset": 240, "peers": 4, "rounds": 2, "local_steps": 2,
        "batch_size": 16, "optimizer": "sgd", "momentum": 0.0, "eval_every": 0, "plots": False}


def _run_study(tmp_path: Path, study: dict, name: str = "study.yaml") -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "p2pfl.study", str(path), "--out", str(tmp_path / "studies"),
                           "--jobs", "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _npz(path: Path, shuffle_test_labels: bool) -> Path:
    """The synthetic set as an npz file of one's own; with `shuffle_test_labels` its test labels permuted."""
    ds = load_dataset("synthetic")
    y_test = ds.y_test.numpy()
    if shuffle_test_labels:
        y_test = np.random.default_rng(7).permutation(y_test)
    np.savez(path, x_train=ds.x_train.numpy(), y_train=ds.y_train.numpy(), x_test=ds.x_test.numpy(), y_test=y_test)
    return path


def _tuned(dataset: str, name: str) -> dict:
    return {"name": name, "base": {**BASE, "dataset": dataset},
            "axes": {"scheme": [{"label": "avg", "gossip": "average", "topology": "cycle"},
                                {"label": "gt", "gossip": "gradient-tracking", "topology": "cycle",
                                 "tune": {"lr": [0.02, 0.6]}}]},
            "tune": {"grid": {"lr": [0.005, 0.05, 0.5]}, "seeds": [100], "validation": 0.25},
            "seeds": [0]}


def _independent_choice(rows: list[dict]) -> dict[str, tuple[str, float]]:
    """Per arm, the lr whose mean held-out score is largest (the first in file order on a tie), from tuning.csv."""
    means: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        means.setdefault(r["scheme"], {}).setdefault(r["lr"], []).append(
            float(r["test_acc_avg"]) if r["test_acc_avg"] else -math.inf)
    out = {}
    for arm, by_lr in means.items():
        best = None
        for lr, scores in by_lr.items():
            mean = sum(scores) / len(scores)
            if best is None or mean > best[1]:
                best = (lr, mean)
        out[arm] = best
    return out


def test_the_tuner_never_reads_the_test_split_and_chooses_the_argmax(tmp_path: Path) -> None:
    """Two studies on one training set whose test labels differ (shuffled in the second): every tuning run scores
    the same and every arm gets the same values, while the final runs, scored on the test set, see the shuffle.
    The choice is the argmax of the scores tuning.csv records, computed here from the file alone."""
    plain = _run_study(tmp_path, _tuned(f"npz:{_npz(tmp_path / 'a.npz', False)}", "plain"), "plain.yaml")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    shuffled = _run_study(tmp_path, _tuned(f"npz:{_npz(tmp_path / 'b.npz', True)}", "shuffled"), "shuffled.yaml")
    assert shuffled.returncode == 0, shuffled.stdout + shuffled.stderr
    a = json.loads((tmp_path / "studies" / "plain" / "tuning.json").read_text())
    b = json.loads((tmp_path / "studies" / "shuffled" / "tuning.json").read_text())
    assert [arm["candidates"] for arm in a["arms"]] == [arm["candidates"] for arm in b["arms"]]
    assert [arm["chosen"] for arm in a["arms"]] == [arm["chosen"] for arm in b["arms"]]
    # the final runs read the test split: the shuffle reaches them (their accuracy on shuffled labels differs)
    finals = {}
    for study in ("plain", "shuffled"):
        summary = json.loads((tmp_path / "studies" / study / "runs" / "scheme-avg__seed-0" / "summary.json")
                             .read_text())
        finals[study] = summary["final"]["test_acc_avg"]
        manifest = json.loads((tmp_path / "studies" / study / "runs" / "scheme-avg__seed-0" / "manifest.json")
                              .read_text())
        assert manifest["dataset"]["scored_on"] == "test"
    assert finals["plain"] != finals["shuffled"]
    # every tuning run was scored on its held-out split, a quarter of the 240 training images
    folder = tmp_path / "studies" / "plain"
    tuning = sorted((folder / "runs").glob("tune__*"))
    assert len(tuning) == 3 + 2
    for run in tuning:
        dataset = json.loads((run / "manifest.json").read_text())["dataset"]
        assert (dataset["scored_on"], dataset["validation"], dataset["train"]) == ("validation", 60, 180)
    rows = list(csv.DictReader((folder / "tuning.csv").open()))
    assert len(rows) == 5 and {r["scheme"] for r in rows} == {"avg", "gt"}
    expected = _independent_choice(rows)
    for arm in a["arms"]:
        lr, score = expected[arm["arm"]["scheme"]]
        assert float(lr) == arm["chosen"]["lr"] and score == arm["score"]
        config = yaml.safe_load((folder / "points" / f"scheme-{arm['arm']['scheme']}__seed-0.yaml").read_text())
        assert config["lr"] == arm["chosen"]["lr"] and "validation" not in config
        ran = yaml.safe_load((folder / "runs" / f"scheme-{arm['arm']['scheme']}__seed-0" / "config.yaml").read_text())
        assert ran["lr"] == arm["chosen"]["lr"] and ran["validation"] == 0.0
    # the gt arm searched its own grid, not the study's
    assert [c["values"]["lr"] for c in a["arms"][1]["candidates"]] == [0.02, 0.6]
    report = subprocess.run([sys.executable, "-m", "analysis.report", str(folder), "--no-plots"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "## Tuning" in report.stdout and "chosen lr" in report.stdout


def test_tuning_points_resume_and_the_choice_is_remade_the_same(tmp_path: Path) -> None:
    """A tuning point whose run is lost and a final point not yet run are the only ones a second invocation runs;
    the choice it remakes is the first one, byte for byte."""
    study = _tuned("synthetic", "resume")
    first = _run_study(tmp_path, study)
    assert first.returncode == 0, first.stdout + first.stderr
    folder = tmp_path / "studies" / "resume"
    before = (folder / "tuning.json").read_text()
    lost = "tune__scheme-avg__lr-0.05__seed-100"
    for name in (lost, "scheme-gt__seed-0"):
        for path in sorted((folder / "runs" / name).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (folder / "runs" / name).rmdir()
        (folder / "logs" / f"{name}.rc").unlink()
    again = _run_study(tmp_path, study)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "running 2 of 7 points (1 tuning)" in again.stdout
    ran = [line.split("] ")[1].split(":")[0] for line in again.stdout.splitlines() if line.startswith("  [")]
    assert sorted(ran) == sorted([lost, "scheme-gt__seed-0"])
    assert (folder / "tuning.json").read_text() == before
    # a finished run of other values than the study now gives is refused, not reported as the chosen one
    ran = folder / "runs" / "scheme-avg__seed-0" / "config.yaml"
    config = yaml.safe_load(ran.read_text())
    ran.write_text(yaml.safe_dump({**config, "lr": 0.123}))
    stale = _run_study(tmp_path, study)
    assert stale.returncode == 1
    assert (f"scheme-avg__seed-0 ran with lr 0.123, the study now gives it {config['lr']!r} (its tune section "
            f"changed): remove {folder / 'runs' / 'scheme-avg__seed-0'} to run it again") in stale.stderr
    ran.write_text(yaml.safe_dump(config))
    study["tune"]["validation"] = 0.3
    changed = _run_study(tmp_path, study)
    assert changed.returncode == 1 and "ran with validation 0.25, the study now gives it 0.3" in changed.stderr


def test_an_arm_s_finals_wait_for_its_own_tuning_points_only(tmp_path: Path) -> None:
    """A tuning point that fails leaves its arm's finals unrun, with one line saying why; the other arm is chosen
    and its finals run, queued as soon as its tuning points are done."""
    study = _tuned("synthetic", "waits")
    study["axes"]["scheme"][0]["tune"] = {"lr": [0.05], "fault": ["raise@0:1"]}  # every avg tuning run fails
    done = _run_study(tmp_path, study)
    assert done.returncode == 1
    assert ("1 arm(s) wait for tuning points not done (scheme=avg): their final points do not run yet"
            in done.stderr)
    folder = tmp_path / "studies" / "waits"
    assert not (folder / "runs" / "scheme-avg__seed-0").exists()
    assert (folder / "runs" / "scheme-gt__seed-0" / "summary.json").is_file()
    selection = json.loads((folder / "tuning.json").read_text())
    assert [a["arm"] for a in selection["arms"]] == [{"scheme": "gt"}] and selection["waiting"] == [{"scheme": "avg"}]
    assert "chosen for scheme=gt: lr=" in done.stdout


def _spec(goal: str = "max") -> TuneSpec:
    return TuneSpec(grid={"lr": [0.1, 0.2, 0.3]}, seeds=[5, 6], validation=0.1, metric="m", goal=goal, per=None)


def test_choose_takes_the_argmax_or_argmin_wherever_it_lies_and_refuses_an_arm_with_no_score() -> None:
    arm = (("scheme", "x"),)
    means = {0.1: 0.3, 0.2: 0.1, 0.3: 0.5}
    runs = [TuningRun(f"p{lr}", arm, {"lr": lr}, 5, {}) for lr in means]
    recorded = {r.name: (means[r.values["lr"]], None) for r in runs}
    grids = {arm: {"lr": [0.1, 0.2, 0.3]}}
    assert choose(_spec("max"), runs, recorded, grids)["arms"][0]["chosen"] == {"lr": 0.3}
    assert choose(_spec("min"), runs, recorded, grids)["arms"][0]["chosen"] == {"lr": 0.2}
    with pytest.raises(TuneError, match="arm scheme=x: no candidate has a finite m in every tuning run"):
        choose(_spec(), runs, {r.name: (None, "diverged") for r in runs}, grids)


def test_a_metric_no_tuning_run_reports_is_refused_naming_those_it_reports(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"final": {"test_acc_avg": 0.5, "zeta2_avg": 1.0}}))
    (tmp_path / "manifest.json").write_text(json.dumps({"dataset": {"scored_on": "validation"}}))
    assert score_of(tmp_path, "test_acc_avg") == (0.5, None)
    with pytest.raises(TuneError, match=r"tune.metric: .* reports no final test_acc \(it reports: test_acc_avg, "
                                        r"zeta2_avg\)"):
        score_of(tmp_path, "test_acc")
    (tmp_path / "manifest.json").write_text(json.dumps({"dataset": {"scored_on": "test"}}))
    with pytest.raises(TuneError, match="scored on test, not a validation split"):
        score_of(tmp_path, "test_acc_avg")


@pytest.mark.parametrize("goal", ["max", "min"])
def test_choose_takes_the_best_mean_a_diverged_run_never_wins_and_ties_go_to_grid_order(goal: str) -> None:
    arm = (("scheme", "x"),)
    scores = {(0.1, 5): 0.5, (0.1, 6): 0.7, (0.2, 5): 0.6, (0.2, 6): 0.6, (0.3, 5): None, (0.3, 6): 9.0}
    runs = [TuningRun(f"p{lr}-{s}", arm, {"lr": lr}, s, {}) for lr, s in scores]
    recorded = {r.name: (scores[(r.values["lr"], r.seed)], None) for r in runs}
    selection = choose(_spec(goal), runs, recorded, {arm: {"lr": [0.1, 0.2, 0.3]}})
    (only,) = selection["arms"]
    assert [c["score"] for c in only["candidates"]] == [pytest.approx(0.6), pytest.approx(0.6), None]
    assert only["chosen"] == {"lr": 0.1}  # 0.1 and 0.2 tie at 0.6 under both goals; 0.3 diverged once
    assert [r["score"] for r in only["candidates"][2]["runs"]] == [None, 9.0]


@pytest.mark.parametrize("study, message", [
    ({"tune": {"grid": {"lr": [0.1]}, "seeds": [0]}, "seeds": [0, 1]}, "tune.seeds: seed 0 is also a final run's seed"),
    ({"tune": {"grid": {"lr": [0.1]}, "bogus": 1}}, "tune.bogus: unknown key"),
    ({"tune": {"grid": {"nope": [0.1]}}}, "tune.grid.nope: not a p2pfl.run option"),
    ({"tune": {"grid": {"lr": []}}}, "tune.grid.lr: must be a non-empty list of distinct values"),
    ({"tune": {"grid": {"seed": [1, 2]}}}, "tune.grid.seed: the tuner sets seed itself"),
    ({"tune": {"grid": {"lr": [0.1]}, "validation": 0.9}}, "tune.validation: the share of training data held out"),
    ({"tune": {"grid": {"lr": [0.1]}, "goal": "best"}}, "tune.goal: max or min"),
    ({"tune": {"grid": {"lr": [0.1]}, "per": ["nope"]}}, "tune.per: 'nope' is not an axis of the study"),
    ({"tune": {"per": ["topology"]}}, "nothing to tune"),
    ({"tune": {"grid": {"lr": [1, 1.0]}}}, "tune.grid.lr: must be a non-empty list of distinct values"),
    ({"tune": {"grid": {"lr": [0.1]}, "per": ["topology", "topology"]}}, "tune.per: a non-empty list of distinct"),
    ({"tune": {"grid": {"topology": ["cycle"]}}}, "sets topology, which the tuner chooses"),
    ({"tune": {"grid": {"lr": [0.1]}}, "base": {**BASE, "dataset": "synthetic", "validation": 0.2}},
     "validation is the tuner's"),
    ({"tune": {"grid": {"lr": [0.1]}}, "base": {**BASE, "dataset": "synthetic", "on_nonfinite": "abort"}},
     "on_nonfinite abort would fail a diverging tuning point"),
])
def test_a_bad_tune_section_is_one_line_naming_the_key(study: dict, message: str) -> None:
    data = {"base": {**BASE, "dataset": "synthetic"}, "axes": {"topology": ["cycle", "complete"]}, **study}
    with pytest.raises(StudyError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        expand(data)


def test_the_order_of_tune_per_does_not_change_the_tuning_points() -> None:
    def names(per: list[str]) -> list[str]:
        return [p.name for p, _ in expand({"base": {**BASE, "dataset": "synthetic"}, "tune": {"grid": {"lr": [0.1]},
                                           "per": per}, "axes": {"topology": ["cycle", "complete"],
                                                                 "alpha": [1.0, 0.1]}}).tuning]

    assert names(["topology", "alpha"]) == names(["alpha", "topology"])
    assert names(["alpha", "topology"])[0] == "tune__topology-cycle__alpha-1__lr-0.1__seed-100"


def test_a_tune_grid_on_an_axis_outside_the_arms_is_refused() -> None:
    data = {"base": {**BASE, "dataset": "synthetic"}, "tune": {"grid": {"lr": [0.1]}, "per": ["topology"]},
            "axes": {"topology": ["cycle", "complete"],
                     "data": [{"label": "a", "alpha": 1.0}, {"label": "b", "alpha": 0.1, "tune": {"lr": [0.2]}}]}}
    with pytest.raises(StudyError, match="arm topology=cycle: its points carry different tune grids"):
        expand(data)


def test_the_tuning_points_span_arms_candidates_other_axes_and_seeds() -> None:
    """per: [topology] over a data axis: each arm's tuning points cover both data values, and a candidate's score
    is their mean; the tuning points run with --validation, their seeds and the candidate's values."""
    data = {"base": {**BASE, "dataset": "synthetic"}, "axes": {"topology": ["cycle", "complete"],
            "data": [{"label": "a", "alpha": 1.0}, {"label": "b", "alpha": 0.1}]}, "seeds": 2,
            "tune": {"grid": {"lr": [0.1, 0.3], "momentum": [0.0, 0.9]}, "seeds": [7, 8], "per": ["topology"]}}
    plan = expand(data)
    assert len(plan.points) == 2 * 2 * 2 and len(plan.tuning) == 2 * 4 * 2 * 2
    first, run = plan.tuning[0]
    assert first.name == "tune__topology-cycle__data-a__lr-0.1__momentum-0__seed-7"
    assert (first.options["validation"], first.options["seed"], first.options["alpha"]) == (0.1, 7, 1.0)
    assert run.arm == (("topology", "cycle"),) and run.context == {"data": "a"}
    assert {p.name for p, _ in plan.tuning} & {p.name for p in plan.points} == set()
    assert plan.arm(plan.points[0]) == (("topology", "cycle"),)


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
def test_the_held_out_split_is_stratified_seeded_and_leaves_the_training_data(fraction: float) -> None:
    labels = np.random.default_rng(3).integers(0, 7, size=997)
    index = held_out(labels, fraction, seed=11, purpose="validation/x")
    assert index.size == round(fraction * labels.size) and np.all(np.diff(index) > 0)
    counts = np.bincount(labels, minlength=7)
    taken = np.bincount(labels[index], minlength=7)
    share = counts * fraction
    assert np.all((taken == np.floor(share)) | (taken == np.ceil(share)))
    assert np.array_equal(index, held_out(labels, fraction, seed=11, purpose="validation/x"))
    assert not np.array_equal(index, held_out(labels, fraction, seed=12, purpose="validation/x"))


def test_validation_is_refused_for_a_method_without_a_dataset(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "4",
                          "--rounds", "1", "--validation", "0.1", "--out", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "p2pfl: error: --validation: consensus is not scored on the run's dataset, so it has no held-out split to "
        "carve; run it without --validation")
