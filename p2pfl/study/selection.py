"""A tuned study's choice, made from its folder: the tuning runs' scores, each arm's chosen values (tuning.json,
tuning.csv) and the final points' configurations with them (p2pfl.study.tune says the rule). An arm is chosen as
soon as its own tuning points are done, so its final points need not wait for the other arms'."""
from __future__ import annotations

import json
from typing import Any

import yaml

from p2pfl.runtime.files import write_atomic
from p2pfl.study.folder import StudyFolder
from p2pfl.study.plan import Plan, Point
from p2pfl.study.tune import TuneError, arm_name, choose, score_of, write_selection


def select(folder: StudyFolder, plan: Plan) -> dict[str, Any]:
    """Choose the values of every arm whose tuning points are all done, from their runs, and write tuning.json /
    tuning.csv; the arms still waiting for a tuning point are listed under "waiting"."""
    assert plan.tune is not None
    undone = {r.arm for p, r in plan.tuning if folder.state(p.name).state != "done"}
    for p, r in plan.tuning:
        if r.arm not in undone:
            _ran_as_planned(folder, p.name, {**r.values, "seed": r.seed, "validation": plan.tune.validation})
    ready = {arm: grid for arm, grid in plan.arms.items() if arm not in undone}
    runs = [(p, r) for p, r in plan.tuning if r.arm in ready]
    scores = {p.name: score_of(folder.run_dir(p.name), plan.tune.metric) for p, _ in runs}
    selection = choose(plan.tune, [r for _, r in runs], scores, ready)
    selection["waiting"] = [dict(arm) for arm in plan.arms if arm in undone]
    write_selection(folder.path, selection)
    return selection


def waiting_error(selection: dict[str, Any]) -> TuneError:
    """The one-line error of the arms whose final points wait for tuning points not done."""
    arms = [arm_name(tuple(a.items())) for a in selection["waiting"]]
    return TuneError(f"{len(arms)} arm(s) wait for tuning points not done ({'; '.join(arms[:3])}"
                     f"{'; ...' if len(arms) > 3 else ''}): their final points do not run yet")


def chosen(selection: dict[str, Any], plan: Plan, point: Point) -> dict[str, Any] | None:
    """The values the final `point`'s arm was given; None while its arm waits."""
    arm = dict(plan.arm(point))
    return next((a["chosen"] for a in selection["arms"] if a["arm"] == arm), None)


def _ran_as_planned(folder: StudyFolder, name: str, expected: dict[str, Any]) -> None:
    """A finished point must have run with `expected` (its run folder's config.yaml): a study whose tune section
    changed since would otherwise report runs of other values as the chosen ones. TuneError names the first key."""
    try:
        ran = yaml.safe_load((folder.run_dir(name) / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        raise TuneError(f"{name}: finished, but its config.yaml cannot be read") from None
    for key, value in expected.items():
        if ran.get(key) != value:
            raise TuneError(f"{name} ran with {key} {ran.get(key)!r}, the study now gives it {value!r} (its tune "
                            f"section changed): remove {folder.run_dir(name)} to run it again")


def write_finals(folder: StudyFolder, plan: Plan, selection: dict[str, Any]) -> list[str]:
    """The configuration of every final point whose arm is chosen, its options with the chosen values (a finished
    one must have run with them); returns their names."""
    written = []
    for point in plan.points:
        values = chosen(selection, plan, point)
        if values is None:
            continue
        if folder.state(point.name).state == "done":
            _ran_as_planned(folder, point.name, values)
        else:
            write_atomic(folder.config(point.name), yaml.safe_dump({**point.options, **values}, sort_keys=False))
        written.append(point.name)
    return written


def ensure_finals(folder: StudyFolder, plan: Plan) -> tuple[dict[str, Any], list[str]]:
    """Select (again: the choice is a pure function of the finished tuning runs) and write the configurations of
    the final points whose arms are chosen; returns the selection and those points' names."""
    selection = select(folder, plan)
    return selection, write_finals(folder, plan, selection)


def load_selection(folder: StudyFolder) -> dict[str, Any] | None:
    """tuning.json, None before the choice is made."""
    path = folder.path / "tuning.json"
    return json.loads(path.read_text()) if path.is_file() else None


__all__ = ["chosen", "ensure_finals", "load_selection", "select", "waiting_error", "write_finals"]
