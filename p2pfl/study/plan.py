"""A study file expanded into its points: a base configuration, axes (a full grid) and/or listed points.

    name: topology-robustness          # the study folder's name (default: the file's stem)
    base: {algorithm: dec-ssl, rounds: 10, ...}    # any p2pfl.run option
    axes:                              # the full grid, in this order (the last varies fastest)
      topology: [star, cycle]          # an option's values
      data:                            # a named bundle: each value sets several options (label optional)
        - {label: iid, partition: iid}
        - {label: dir0.1, partition: dirichlet, alpha: 0.1}
      seed: [0, 1, 2]
    points:                            # and/or listed points (each a mapping of options, or of axis values)
      - {topology: complete, seed: 0}
    tune: {grid: {lr: [0.01, 0.1]}, seeds: [100]}   # tuned arms (p2pfl.study.tune): chosen on held-out data
    plugins: [my_scheme.py]            # in base (or a point): paths relative to the study file's folder
    slurm: {partition: gpu, time: "02:00:00", throttle: 8}   # sbatch options of --slurm

Each point is named from its axis labels in axis order (`topology-cycle__data-iid__seed-1`), so a name is stable
as long as the study file says the same; its options are the base updated by its axis values. Two points that
would get one name with different options (two bundles with one label) and an empty listed point are refused;
`check_points` validates every point as p2pfl.run would, before any runs. The base's plug-ins are imported while
the file is read (their options may be set anywhere in it); every point's `plugins` are absolute paths, so each
point's run (a fresh interpreter, locally or under Slurm) imports them from its --config.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from p2pfl import plugins
from p2pfl.config import ConfigError, make_config, options, resolve
from p2pfl.names import folder_name_error
from p2pfl.shown import shown
from p2pfl.study.tune import TUNE_PREFIX, TuneError, TuneSpec, TuningRun, arm_axes, arm_name, arm_of, value_label
from p2pfl.study.tune import candidates as tune_candidates
from p2pfl.study.tune import grid as tune_grid
from p2pfl.study.tune import parse as tune_parse
from p2pfl.suggest import hint, option_hint
from p2pfl.yamlfile import safe_load

SEED = "seed"
#: The most points a study may have (grid and listed points together), checked before the grid is built.
MAX_POINTS = 100_000


@functools.cache
def _options() -> frozenset[str]:
    """The names of p2pfl.run's options, read when a study is first parsed (the methods declare theirs, so this
    imports them; importing this module stays light)."""
    return frozenset(f.name for f in options())


class StudyError(ValueError):
    """A study file that cannot be expanded (one line, naming the key)."""


#: A study scores the peers' own models at every evaluation unless its file sets `peer_scores` (or `peer-scores`)
#: itself: its report leads with the peers' mean and worst peer over rounds (analysis.study.headline_metric). The
#: cost: each evaluation scores every distinct model of the --eval-peers sample (every peer by default) instead of
#: the network average alone, one evaluation a peer per evaluation round.
PEER_SCORES, STUDY_PEER_SCORES = "peer_scores", "every"


def point_options(opts: dict[str, Any]) -> dict[str, Any]:
    """A point's p2pfl.run options as its run gets them: ``opts`` (the base updated by its axis values) with
    `peer_scores: every` where the study does not set `peer_scores` and the point's method reads it (consensus,
    quadratic and fedmuscle score every peer at every evaluation already: their `ignores`, which would warn)."""
    if PEER_SCORES in opts:
        return opts
    try:
        from p2pfl.options import catalogue

        algorithm = opts.get("algorithm") or make_config().algorithm
        if PEER_SCORES in catalogue().get(str(algorithm)).ignores:
            return opts
    except (KeyError, ValueError, TypeError, ImportError):  # an unknown method: check_points refuses it, not here
        pass
    return {**opts, PEER_SCORES: STUDY_PEER_SCORES}


@dataclass(frozen=True)
class Point:
    """One run of a study: its name, its label on each axis and its complete p2pfl.run options (a tuned study's
    final point: without the tuned options, which its arm's choice adds; `grid`: its bundles' own tune grids)."""

    name: str
    axes: dict[str, str]
    options: dict[str, Any]
    grid: dict[str, list[Any]] = field(default_factory=dict)
    varied: frozenset[str] = frozenset()  # the options its axis values and listed entries set (the base aside)


@dataclass(frozen=True)
class Plan:
    name: str
    axes: list[str]
    points: list[Point]
    base: dict[str, Any] = field(default_factory=dict)
    slurm: dict[str, Any] = field(default_factory=dict)
    root: str | None = None  # the folder the study file's relative plug-in paths are resolved against
    tune: TuneSpec | None = None  # the tune section (None: every point runs as written)
    tuning: list[tuple[Point, TuningRun]] = field(default_factory=list)  # the tuning points, run first
    arms: dict[tuple[tuple[str, str], ...], dict[str, list[Any]]] = field(default_factory=dict)  # arm -> its grid

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "axes": self.axes, "base": self.base, "slurm": self.slurm, "root": self.root,
               "points": [{"name": p.name, "axes": p.axes, "options": p.options} for p in self.points]}
        if self.tune is not None:
            out["tune"] = self.tune.to_dict()
            out["tuning"] = [{"name": p.name, "axes": p.axes, "options": p.options, "arm": dict(r.arm),
                              "values": r.values, "seed": r.seed, "context": r.context} for p, r in self.tuning]
        return out

    def point(self, name: str) -> Point:
        return next(p for p in [*self.points, *(t for t, _ in self.tuning)] if p.name == name)

    def all_points(self) -> list[Point]:
        """The tuning points (first: they run before the final points), then the final points."""
        return [p for p, _ in self.tuning] + self.points

    def arm(self, point: Point) -> tuple[tuple[str, str], ...]:
        """The arm a final point belongs to (tuned studies)."""
        assert self.tune is not None
        return arm_of(point.axes, arm_axes(self.tune, self.axes))


def _key(name: Any) -> str:
    return str(name).replace("-", "_")


def _label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value) if abs(value) < 1e15 else value
    if isinstance(value, (list, tuple)):
        return "+".join(_label(v) for v in value)
    return str(value)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", text).strip("_") or "_"


def _axis_value(axis: str, value: Any) -> tuple[str, dict[str, Any]]:
    """(label, options) of one value on an axis: an option's value, or a bundle mapping of options (its `tune`
    grid, when it has one, is read by `_bundle_grid`)."""
    if isinstance(value, dict):
        bundle = {_key(k): v for k, v in value.items() if k not in ("label", "tune")}
        unknown = sorted(set(bundle) - _options())
        if unknown:
            raise StudyError(f"axes.{axis}: unknown option '{unknown[0]}'{option_hint(unknown[0], _options())} "
                             "(see python -m p2pfl.run --help)")
        label = value.get("label", "_".join(f"{k}-{_label(v)}" for k, v in bundle.items()))
        return _label(label), bundle
    if _key(axis) not in _options():
        raise StudyError(f"axes.{axis}: not a p2pfl.run option{option_hint(axis, _options()) or ';'} a named axis "
                         "takes mappings of options ({label: ..., option: value, ...})")
    return _label(value), {_key(axis): value}


def _bundle_grid(axis: str, value: Any) -> dict[str, list[Any]]:
    """A bundle's own tune grid ({} for none)."""
    if not isinstance(value, dict) or "tune" not in value:
        return {}
    try:
        return tune_grid(value["tune"], f"axes.{axis}.tune", _options())
    except TuneError as exc:
        raise StudyError(str(exc)) from None


def _with_plugins(opts: dict[str, Any], root: str | None) -> dict[str, Any]:
    """`opts` with its `plugins` (or `plugin`) as one list of resolved specs (paths made absolute against
    `root`, the study file's folder)."""
    listed = [spec for key in ("plugins", "plugin") if key in opts for spec in plugins.specs(opts.pop(key), root)]
    return {**opts, "plugins": list(dict.fromkeys(listed))} if listed else opts


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise StudyError(f"{key}: must be a mapping")
    return value


def expand(data: Any, default_name: str = "study", root: str | None = None) -> Plan:
    """The plan of a parsed study file: every point of the grid, then every listed point; StudyError names the
    key at fault. Point options are validated by `check_points`; relative plug-in paths are resolved against
    `root` (default: the working directory)."""
    if not isinstance(data, dict):
        raise StudyError("the study file must hold a mapping (name, base, axes, points, slurm)")
    keys = ("name", "base", "axes", "points", "seeds", "slurm", "tune")
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise StudyError(f"unknown key '{unknown[0]}'{hint(str(unknown[0]), keys)} (allowed: {', '.join(keys)})")
    try:
        base = _with_plugins({_key(k): v for k, v in _mapping(data, "base").items()}, root)
        plugins.load(base.get("plugins", ()))
    except plugins.PluginError as exc:
        raise StudyError(f"base: {exc}") from None
    _options.cache_clear()  # the plug-ins may have added options
    bad = sorted(set(base) - _options())
    if bad:
        raise StudyError(f"base: unknown option '{bad[0]}'{option_hint(bad[0], _options())} (see python -m p2pfl.run "
                         "--help)")
    axes = dict(_mapping(data, "axes"))
    if "seeds" in data:
        seeds = data["seeds"]
        if isinstance(seeds, int) and not isinstance(seeds, bool):
            if not 1 <= seeds <= MAX_POINTS:
                raise StudyError(f"seeds: a count in [1, {MAX_POINTS}] (the most points a study may have) or a list "
                                 f"of seeds, got {shown(seeds)}")
            seeds = list(range(seeds))
        axes[SEED] = seeds
    for axis, values in axes.items():
        if not isinstance(values, list) or not values:
            raise StudyError(f"axes.{axis}: must be a non-empty list of values")
    listed = data.get("points") or []
    if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
        raise StudyError("points: must be a list of mappings")
    count = (math.prod(len(v) for v in axes.values()) if axes else 0) + len(listed)
    if count > MAX_POINTS:
        raise StudyError(f"{count} points: a study may have at most {MAX_POINTS} (split it into several studies)")
    grid: list[list[tuple[str, str, dict[str, Any], dict[str, list[Any]]]]] = [[]]
    for axis, values in axes.items():
        choices = [(str(axis), *_axis_value(str(axis), v), _bundle_grid(str(axis), v)) for v in values]
        grid = [g + [c] for g in grid for c in choices]
    if not axes:
        grid = []
    for i, entry in enumerate(listed):
        if not entry:
            raise StudyError(f"points[{i}]: an empty point names no option (it would have no name)")
        row = []
        for axis, value in entry.items():
            if str(axis) in axes and _key(axis) not in _options() and not isinstance(value, dict):
                # an axis value by its label, e.g. data: iid
                match = [(str(axis), *_axis_value(str(axis), v), _bundle_grid(str(axis), v)) for v in axes[axis]
                         if _axis_value(str(axis), v)[0] == _label(value)]
                if not match:
                    raise StudyError(f"points[{i}].{axis}: no value labelled '{value}' on that axis")
                row.append(match[0])
            else:
                row.append((str(axis), *_axis_value(str(axis), value), _bundle_grid(str(axis), value)))
        grid.append(row)
    if not grid:
        raise StudyError("the study has no points: give axes and/or points")
    order = list(axes) + [a for row in grid for a, _, _, _ in row if a not in axes]
    order = list(dict.fromkeys(order))
    points: list[Point] = []
    seen: dict[str, Point] = {}
    for row in grid:
        labels = {a: lab for a, lab, _, _ in row}
        opts = dict(base)
        own_grid: dict[str, list[Any]] = {}
        varied: set[str] = set()
        for _, _, o, g in row:
            opts.update(o)
            own_grid.update(g)
            varied.update(o)
        try:
            opts = point_options(_with_plugins(opts, root))
        except plugins.PluginError as exc:
            raise StudyError(f"point {shown(labels)}: {exc}") from None
        name = "__".join(_safe(f"{a}-{labels[a]}") for a in order if a in labels)
        if folder_name_error(name) is not None:
            raise StudyError(f"point {shown(labels)}: its name {shown(name)} {folder_name_error(name)}")
        if name in seen:
            if seen[name].options != opts:
                other = seen[name].options
                key = next(k for k in [*other, *opts] if other.get(k) != opts.get(k))
                raise StudyError(f"points {shown(seen[name].axes)} and {shown(labels)} both get the name "
                                 f"{shown(name)} but differ in {key} ({shown(other.get(key))} vs "
                                 f"{shown(opts.get(key))}); give them distinct labels")
            continue  # a listed point that the grid already holds
        seen[name] = Point(name=name, axes=labels, options=opts, grid=own_grid, varied=frozenset(varied))
        points.append(seen[name])
    slurm = _mapping(data, "slurm")
    name = _safe(str(data.get("name", default_name)))
    if folder_name_error(name) is not None:  # the study folder goes under --out: '..' would be its parent
        raise StudyError(f"name: {folder_name_error(name)}")
    if "tune" not in data:
        if any(p.grid for p in points):
            raise StudyError("an axis value has a tune grid but the study has no tune section")
        return Plan(name=name, axes=order, points=points, base=base, slurm=slurm, root=root)
    try:
        spec = tune_parse(data["tune"], _options())
    except TuneError as exc:
        raise StudyError(str(exc)) from None
    arms, tuning = _tuning(spec, order, points)
    return Plan(name=name, axes=order, points=points, base=base, slurm=slurm, root=root, tune=spec, tuning=tuning,
                arms=arms)


def _tuning(spec: TuneSpec, order: list[str], points: list[Point]
            ) -> tuple[dict[tuple[tuple[str, str], ...], dict[str, list[Any]]], list[tuple[Point, TuningRun]]]:
    """Each arm's grid and the tuning points (tune.py's docstring): per arm, candidate, setting of the other axes
    and tuning seed, in that order."""
    per = arm_axes(spec, order)
    missing = [a for a in spec.per or () if a not in order or a == SEED]
    if missing:
        raise StudyError(f"tune.per: '{missing[0]}' is not an axis of the study (axes: {', '.join(order)}; not seed)")
    finals = {p.options.get(SEED, 0) for p in points}
    overlap = sorted(finals & set(spec.seeds))
    if overlap:
        raise StudyError(f"tune.seeds: seed {overlap[0]} is also a final run's seed; tune on other seeds")
    arms: dict[tuple[tuple[str, str], ...], dict[str, list[Any]]] = {}
    templates: dict[tuple[tuple[str, str], ...], dict[tuple[tuple[str, str], ...], Point]] = {}
    for p in points:
        arm = arm_of(p.axes, per)
        grid = {**spec.grid, **p.grid}
        clash = sorted(set(grid) & p.varied)
        if clash:
            raise StudyError(f"point {p.name}: an axis value or listed point sets {clash[0]}, which the tuner "
                             f"chooses (tune grid); set it in base or leave it to the tuner")
        if p.options.get("validation"):
            raise StudyError(f"point {p.name}: validation is the tuner's (tune.validation, for its tuning points); "
                             "a final point trains on the whole training set and is scored on the test set")
        if p.options.get("on_nonfinite") == "abort":
            raise StudyError(f"point {p.name}: on_nonfinite abort would fail a diverging tuning point and keep its "
                             "arm waiting; a tuned study runs with rollback (a diverging candidate scores low)")
        if arms.setdefault(arm, grid) != grid:
            raise StudyError(f"arm {arm_name(arm)}: its points carry different tune grids (a bundle's tune grid "
                             "belongs on one of the tune.per axes)")
        context = tuple((a, lab) for a, lab in p.axes.items() if a != SEED and a not in per)
        templates.setdefault(arm, {}).setdefault(context, p)
    counted = sum(math.prod(len(v) for v in grid.values()) * len(templates[arm]) * len(spec.seeds)
                  for arm, grid in arms.items() if grid)
    if counted + len(points) > MAX_POINTS:  # counted as a product first: a 10^10 grid is never listed
        raise StudyError(f"{counted + len(points)} points with the tuning points: a study may have at most "
                         f"{MAX_POINTS} (a smaller tune grid, fewer tune.seeds or arms)")
    tuning: list[tuple[Point, TuningRun]] = []
    for arm, grid in arms.items():
        if not grid:
            raise StudyError(f"arm {arm_name(arm)}: nothing to tune (give tune.grid or the arm's own tune grid)")
        for values in tune_candidates(grid):
            for context, template in templates[arm].items():
                for seed in spec.seeds:
                    labels = {**dict(arm), **dict(context), **{k: value_label(v) for k, v in values.items()},
                              SEED: str(seed)}
                    name = "__".join([TUNE_PREFIX, *(_safe(f"{a}-{_label(lab)}") for a, lab in labels.items())])
                    if folder_name_error(name) is not None:
                        raise StudyError(f"tuning point {shown(labels)}: its name {folder_name_error(name)}")
                    options = {**template.options, **values, SEED: seed, "validation": spec.validation}
                    point = Point(name=name, axes=labels, options=options)
                    tuning.append((point, TuningRun(name, arm, values, seed, dict(context))))
    names = [p.name for p, _ in tuning]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise StudyError(f"two tuning points get the name {shown(twice)}: give the axes' values distinct labels")
    return arms, tuning


def load_study(path: str | Path, root: str | None = None) -> tuple[Plan, str]:
    """Read and expand a study file; returns the plan and the file's text (kept in the study folder). Relative
    plug-in paths are resolved against `root`, default the file's folder."""
    path = Path(path)
    root = root or str(path.resolve().parent)
    try:
        text = path.read_text()
        data = safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise StudyError(f"{path}: cannot be read ({type(exc).__name__})") from None
    except yaml.YAMLError as exc:
        raise StudyError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return expand(data, default_name=path.stem, root=root), text
    except ConfigError as exc:
        raise StudyError(str(exc)) from None


def check_points(plan: Plan, ranks: int) -> None:
    """Validate every point as p2pfl.run does on `ranks` ranks (its options, then what its world size decides; a
    tuned study's tuning points cover every value its final points may be given); StudyError names the first bad
    point and its option."""
    for point in plan.all_points():
        try:
            resolve(make_config(**point.options), ranks)
        except ValueError as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StudyError(f"point {point.name}: {line}") from None
