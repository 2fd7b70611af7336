"""The peer specification of heterogeneous multi-task runs (FedMuscle, SPEC §6): which model, task, dataset
and label set every peer has, and where the public set comes from.

A peers-spec file (``--peers-spec FILE``) is YAML::

    peers: 9                  # optional: K; default: the peers the groups name
    public:                   # optional: the unlabeled public set every peer reads
      dataset: cifar10        # default cifar10 (synthetic when every group uses synthetic data)
      size: 5000              # default --public-size; a count, or a fraction of the training set in (0, 1)
      options: {}             # dataset options (synthetic only, e.g. {seed: 1})
    test_subset: 2000         # optional: evaluate on N test images (a seeded subset) of each task (default all)
    groups:                   # or a top-level list of groups
      - peers: 0-2            # an id, "a-b" (inclusive), or a list of those; or `count: n` (the next n peers)
        model: simple-cnn     # an encoder name: simple-cnn, resnet-small, resnet18, vit-tiny, hf:<local path>
        model_options: {}     # encoder keyword options (vit-tiny depth/hidden_size/..., hf: lora_rank/pool/...)
        task: cifar10         # cifar10 | cifar10-coarse | mosaic | fashion-mnist | cifar100 | synthetic | classify
        dataset: cifar10      # default: the task's own dataset (cifar10 for cifar10/-coarse/mosaic)
        dataset_options: {}   # synthetic only (num_train, num_test, channels, image_size, seed, noise)
        labels: [0, 1, 2]     # optional label set: keep only these classes of the dataset
        init: encoder.pt      # optional: a pretrained encoder (python -m p2pfl.pretrain) for a built-in model

Tasks: a dataset name (``cifar10``, ``fashion-mnist``, ``cifar100``, ``synthetic``) or ``classify`` is
single-label classification of the group's dataset (over ``labels`` when given, re-indexed 0..L-1);
``cifar10-coarse`` is vehicle (classes 0, 1, 8, 9) vs animal, on a dataset that declares such a split
(`Dataset.coarse_classes`: cifar10, synthetic, a plug-in's own); ``mosaic`` is multi-label (2x2 mosaics of
downsampled images, multi-hot over the L classes). The task names the kind of target; ``dataset`` names the
images, so ``task: cifar10, dataset: synthetic`` is a 10-class task on synthetic images (for tests).

Every error a user can make raises :class:`PeerSpecError` (a ``ValueError``) with one line that names the
file and the entry.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from p2pfl.data.datasets import DATASETS, STAND_IN, canonical_name, load_dataset
from p2pfl.fedmuscle.tasks import CLASSIFICATION_TASKS, MULTILABEL_TASKS
from p2pfl.models.encoders import MODELS, model_choices
from p2pfl.yamlfile import safe_load

#: task -> the dataset it reads by default (None: the run's --dataset).
TASK_DATASET: dict[str, str | None] = {
    "cifar10": "cifar10",
    "cifar10-coarse": "cifar10",
    "mosaic": "cifar10",
    "fashion-mnist": "fashion-mnist",
    "cifar100": "cifar100",
    "synthetic": "synthetic",
    "classify": None,
}
TASKS = tuple(TASK_DATASET)

_GROUP_KEYS = ("peers", "count", "model", "model_options", "task", "dataset", "dataset_options", "labels", "name",
               "init")
_TOP_KEYS = ("peers", "public", "test_subset", "groups")
_PUBLIC_KEYS = ("dataset", "size", "options")


class PeerSpecError(ValueError):
    """A peers-spec file that cannot be used; the message is one line naming the file and the entry."""


@dataclass(frozen=True)
class PeerEntry:
    """One peer's assignment."""

    peer: int
    group: int
    model: str
    task: str
    dataset: str
    model_options: dict = field(default_factory=dict, hash=False, compare=True)
    dataset_options: dict = field(default_factory=dict, hash=False, compare=True)
    labels: tuple[int, ...] | None = None
    init: str | None = None  # a pretrained encoder (python -m p2pfl.pretrain) every peer of the group starts from

    @property
    def dataset_key(self) -> str:
        """The dataset together with its options: peers with equal keys read the same images."""
        return dataset_key(self.dataset, self.dataset_options)

    @property
    def multilabel(self) -> bool:
        return self.task in MULTILABEL_TASKS

    @property
    def metric(self) -> str:
        """The task metric's name: mAP for multi-label, accuracy otherwise."""
        return "mAP" if self.multilabel else "accuracy"


@dataclass
class PeersSpec:
    """Every peer's assignment (index = peer id) and the public set."""

    peers: list[PeerEntry]
    public_dataset: str
    public_size: int | float
    public_options: dict = field(default_factory=dict)
    test_subset: int | None = None
    source: str = "<default>"

    @property
    def n_peers(self) -> int:
        return len(self.peers)

    @property
    def public_key(self) -> str:
        return dataset_key(self.public_dataset, self.public_options)

    def groups(self) -> dict[int, list[PeerEntry]]:
        """group index -> its peers, ascending."""
        out: dict[int, list[PeerEntry]] = {}
        for e in self.peers:
            out.setdefault(e.group, []).append(e)
        return out

    def task_groups(self) -> list[list[PeerEntry]]:
        """The peers grouped by what they learn, (dataset, task, label set), whatever their models: the groups
        the data is split within. Ordered by their lowest peer."""
        out: dict[tuple, list[PeerEntry]] = {}
        for e in self.peers:
            out.setdefault((e.dataset_key, e.task, e.labels), []).append(e)
        return list(out.values())

    def manifest(self) -> list[dict]:
        """manifest["peers_spec"]: one {"peer", "model", "task", ...} per peer."""
        task_group = {e.peer: g for g, members in enumerate(self.task_groups()) for e in members}
        return [{"peer": e.peer, "model": e.model, "task": e.task, "dataset": e.dataset_key, "group": e.group,
                 "task_group": task_group[e.peer], "labels": list(e.labels) if e.labels is not None else None,
                 "metric": e.metric, **({"init": e.init} if e.init else {})} for e in self.peers]


def dataset_key(name: str, options: dict | None) -> str:
    """``name`` or ``name{k=v,...}`` (sorted options)."""
    if not options:
        return name
    return name + "{" + ",".join(f"{k}={options[k]}" for k in sorted(options)) + "}"


# ------------------------------------------------------------------------------------------------ parsing

def _fail(source: str, where: str, message: str) -> PeerSpecError:
    return PeerSpecError(f"--peers-spec {source}: {where}{': ' if where else ''}{message}")


def _peer_ids(value: Any, source: str, where: str) -> list[int]:
    """An id, 'a-b', 'a..b' or a list of those -> the ids, in the order given."""
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            raise _fail(source, where, f"peers: {item!r} is not a peer id")
        if isinstance(item, int):
            out.append(item)
            continue
        text = str(item).strip()
        m = re.fullmatch(r"(\d+)\s*(?:-|\.\.)\s*(\d+)", text)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if b < a:
                raise _fail(source, where, f"peers: empty range {text!r} (write low-high)")
            out.extend(range(a, b + 1))
        elif re.fullmatch(r"\d+", text):
            out.append(int(text))
        else:
            raise _fail(source, where, f"peers: {item!r} is not an id, a range 'a-b' or a list of those")
    if any(p < 0 for p in out):
        raise _fail(source, where, "peers: ids must be >= 0")
    return out


def _mapping(value: Any, source: str, where: str, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(source, where, f"{what} must be a mapping of option: value, got {value!r}")
    return {str(k).replace("-", "_"): v for k, v in value.items()}


def _dataset(name: Any, options: dict, source: str, where: str) -> str:
    try:
        ds = canonical_name(str(name))
    except ValueError as exc:
        raise _fail(source, where, str(exc)) from None
    allowed = DATASETS.get(ds).load_options
    if options and not allowed:
        takers = [n for n in DATASETS if DATASETS.get(n).load_options]
        raise _fail(source, where, f"dataset options apply to the {' and '.join(takers)} dataset"
                                   f"{'s' if len(takers) > 1 else ''} only, not {ds!r}")
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise _fail(source, where, f"unknown dataset option(s) {', '.join(bad)}; allowed: {', '.join(allowed)}")
    return ds


def _stand_ins() -> list[str]:
    """The datasets that stand in for any a task names (generated ones: `STAND_IN`)."""
    return DATASETS.capable(STAND_IN)


def dataset_classes(dataset: str, options: dict | None = None) -> int:
    """How many classes a dataset has: its `num_classes` option (the synthetic set's), else what its component
    declares, else counted from its labels (a dataset that declares none is loaded once here)."""
    declared = (options or {}).get("num_classes", DATASETS.get(dataset).num_classes)
    return int(declared) if declared is not None else load_dataset(dataset, **(options or {})).num_classes


def coarse_datasets() -> list[str]:
    """The datasets whose classes split in two coarse ones (`Dataset.coarse_classes`): cifar10-coarse's."""
    return [name for name in DATASETS if DATASETS.get(name).coarse_classes is not None]


def _labels(labels: Any, task: str, dataset: str, n_classes: int, source: str, where: str
            ) -> tuple[int, ...] | None:
    """A group's label set, checked against its dataset's classes (None: every class)."""
    if labels is None:
        return None
    if not isinstance(labels, list) or not labels or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in labels):
        raise _fail(source, where, f"labels must be a non-empty list of class indices, got {labels!r}")
    if len(set(labels)) != len(labels):
        raise _fail(source, where, f"labels repeat a class: {labels}")
    if min(labels) < 0 or max(labels) >= n_classes:
        raise _fail(source, where, f"labels must lie in 0..{n_classes - 1} for dataset {dataset!r}, "
                                   f"got {labels}")
    if task in CLASSIFICATION_TASKS and len(labels) < 2:
        raise _fail(source, where, "a classification task needs at least 2 labels")
    return tuple(int(c) for c in labels)


def _group(group: Any, next_peer: int, source: str, where: str, default_dataset: str, check_init: bool = True
           ) -> tuple[list[int], dict[str, Any]]:
    """One group of the spec, checked: its peer ids and the fields of their entries."""
    if not isinstance(group, dict):
        raise _fail(source, where, f"must be a mapping, got {group!r}")
    group = {str(k).replace("-", "_"): v for k, v in group.items()}
    bad = [k for k in group if k not in _GROUP_KEYS]
    if bad:
        raise _fail(source, where, f"unknown key {bad[0]!r}; allowed: {', '.join(_GROUP_KEYS)}")
    if ("peers" in group) == ("count" in group):
        raise _fail(source, where, "give exactly one of 'peers' (ids or ranges) and 'count'")
    if "count" in group:
        count = group["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise _fail(source, where, f"count must be a positive integer, got {count!r}")
        ids = list(range(next_peer, next_peer + count))
    else:
        ids = _peer_ids(group["peers"], source, where)
        if not ids:
            raise _fail(source, where, "peers: no peer named")
    for key in ("model", "task"):
        if key not in group or group[key] in (None, ""):
            raise _fail(source, where, f"'{key}' is required")
    model = str(group["model"])
    task = str(group["task"]).strip().lower().replace("_", "-")
    if task not in TASK_DATASET:
        raise _fail(source, where, f"unknown task {group['task']!r}; allowed: {', '.join(TASKS)}")
    dataset_options = _mapping(group.get("dataset_options"), source, where, "dataset_options")
    ds_name = group.get("dataset") or TASK_DATASET[task] or default_dataset
    dataset = _dataset(ds_name, dataset_options, source, where)
    stand_ins = _stand_ins()  # a task named after a dataset reads it, or a stand-in (a stand-in's task: any)
    if TASK_DATASET[task] == task and task not in stand_ins and dataset not in (task, *stand_ins):
        raise _fail(source, where, f"task {task!r} reads dataset {task!r} (or {' or '.join(stand_ins)}), "
                                   f"not {dataset!r}")
    component = DATASETS.get(dataset)
    if task == "cifar10-coarse" and component.coarse_classes is None:
        raise _fail(source, where, f"task 'cifar10-coarse' needs a 10-class CIFAR-like dataset "
                                   f"({', '.join(coarse_datasets())}), not {dataset!r}")
    n_classes = dataset_classes(dataset, dataset_options)
    split_of = component.num_classes  # the class count its coarse split is declared for (None: its own)
    if task == "cifar10-coarse" and n_classes != (n_classes if split_of is None else split_of):
        raise _fail(source, where, f"task 'cifar10-coarse' needs {split_of} classes, the dataset has {n_classes}")
    labels = _labels(group.get("labels"), task, dataset, n_classes, source, where)
    model_options = _mapping(group.get("model_options"), source, where, "model_options")
    return ids, dict(model=model, task=task, dataset=dataset, model_options=model_options,
                     dataset_options=dataset_options, labels=labels,
                     init=_init(group.get("init"), model, source, where, check_init))


def _init(init: Any, model: str, source: str, where: str, check: bool = True) -> str | None:
    """A group's `init:` checkpoint: an existing file, as given or relative to the spec's folder (any path
    when not `check`ed)."""
    if init is None:
        return None
    if not isinstance(init, str) or not init:
        raise _fail(source, where, f"init must be a file path, got {init!r}")
    if model in model_choices() and model not in MODELS:  # a prefix form (hf:PATH), not a registered family
        raise _fail(source, where, "init is for built-in models; an hf: model loads its own folder "
                                   "(python -m p2pfl.pretrain --model hf-vit writes one)")
    for candidate in (init, os.path.join(os.path.dirname(source), init)):
        if os.path.isfile(candidate):
            return candidate
    if not check:
        return init
    raise _fail(source, where, f"init: file not found: {init}")


def _peer_count(data: dict, entries: dict[int, PeerEntry], n_peers: int | None, source: str) -> int:
    """K: the spec's `peers`, else one past the highest peer named; every peer 0..K-1 has exactly one group."""
    total = data.get("peers")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 2):
        raise _fail(source, "peers", f"must be an integer >= 2, got {total!r}")
    k = total if total is not None else max(entries) + 1
    if n_peers is not None and n_peers != k:
        raise _fail(source, "", f"assigns {k} peers but the run has --peers {n_peers}")
    beyond = sorted(p for p in entries if p >= k)
    if beyond:
        raise _fail(source, "", f"peer {beyond[0]} is beyond the {k} peers of the run")
    missing = [p for p in range(k) if p not in entries]
    if missing:
        raise _fail(source, "", f"peer(s) {missing[:10]} have no group (every peer 0..{k - 1} needs one)")
    if k < 2:
        raise _fail(source, "", f"needs at least 2 peers, got {k}")
    return k


def _public(data: dict, entries: dict[int, PeerEntry], public_size: int | float, source: str
            ) -> tuple[str, int | float, dict]:
    """The public set: (dataset, size, dataset options)."""
    public = _mapping(data.get("public"), source, "public", "public")
    bad = [k_ for k_ in public if k_ not in _PUBLIC_KEYS]
    if bad:
        raise _fail(source, "public", f"unknown key {bad[0]!r}; allowed: {', '.join(_PUBLIC_KEYS)}")
    public_options = _mapping(public.get("options"), source, "public", "options")
    public_dataset = _dataset(public.get("dataset") or _default_public({e.dataset for e in entries.values()}),
                              public_options, source, "public")
    size = public.get("size", public_size)
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0 or (
            isinstance(size, float) and size >= 1 and not size.is_integer()):
        raise _fail(source, "public", f"size must be a count >= 1 or a fraction in (0, 1), got {size!r}")
    if isinstance(size, float) and size >= 1:
        size = int(size)
    return public_dataset, size, public_options


def parse_peers_spec(data: Any, source: str = "<spec>", *, default_dataset: str = "cifar10",
                     public_size: int | float = 5000, n_peers: int | None = None, check_init: bool = True
                     ) -> PeersSpec:
    """Check and expand a loaded peers spec. ``default_dataset`` serves tasks without a dataset of their
    own (``classify``); ``public_size`` is the default public size; ``n_peers`` (--peers) must agree;
    ``check_init=False`` accepts `init:` files not made yet (pretraining reads the spec before writing them)."""
    if isinstance(data, list):
        data = {"groups": data}
    if not isinstance(data, dict):
        raise _fail(source, "", "must hold a mapping with a 'groups' list (or a list of groups)")
    unknown = [k for k in data if str(k) not in _TOP_KEYS]
    if unknown:
        raise _fail(source, "", f"unknown key {unknown[0]!r}; allowed: {', '.join(_TOP_KEYS)}")
    groups = data.get("groups")
    if not isinstance(groups, list) or not groups:
        raise _fail(source, "", "'groups' must be a non-empty list of {peers or count, model, task, ...}")
    entries: dict[int, PeerEntry] = {}
    next_peer = 0
    for g, group in enumerate(groups):
        where = f"group {g}"
        ids, fields_ = _group(group, next_peer, source, where, default_dataset, check_init)
        for p in ids:
            if p in entries:
                raise _fail(source, where, f"peer {p} is already assigned by group {entries[p].group}")
            entries[p] = PeerEntry(peer=p, group=g, **fields_)
        next_peer = max(next_peer, max(ids) + 1)
    k = _peer_count(data, entries, n_peers, source)
    public_dataset, size, public_options = _public(data, entries, public_size, source)
    test_subset = data.get("test_subset")
    if test_subset is not None and (isinstance(test_subset, bool) or not isinstance(test_subset, int)
                                    or test_subset < 1):
        raise _fail(source, "test_subset", f"must be a positive integer, got {test_subset!r}")
    return PeersSpec(peers=[entries[p] for p in range(k)], public_dataset=public_dataset, public_size=size,
                     public_options=public_options, test_subset=test_subset, source=source)


def read_spec_file(path: str) -> Any:
    """The YAML content of a peers-spec file (PeerSpecError when missing or not YAML)."""
    if not os.path.isfile(path):
        raise PeerSpecError(f"--peers-spec: file not found: {path}")
    try:
        with open(path) as fh:
            return safe_load(fh)
    except yaml.YAMLError as exc:
        raise PeerSpecError(f"--peers-spec {path}: not valid YAML ({str(exc).splitlines()[0]})") from None


def load_peers_spec(path: str, *, default_dataset: str = "cifar10", public_size: int | float = 5000,
                    n_peers: int | None = None, check_init: bool = True) -> PeersSpec:
    """Read and check a peers-spec file (see the module docstring)."""
    return parse_peers_spec(read_spec_file(path), path, default_dataset=default_dataset,
                            public_size=public_size, n_peers=n_peers, check_init=check_init)


def read_run_spec(cfg: Any) -> PeersSpec:
    """A run's --peers-spec, read and checked once, when the run is resolved (p2pfl.config.resolve): --dataset
    serves the tasks without a dataset of their own, --public-size is the default public size, and --peers, when
    given, must agree."""
    return load_peers_spec(cfg.peers_spec, default_dataset=cfg.dataset, public_size=cfg.public_size,
                           n_peers=cfg.peers)


def uniform_spec(n_peers: int, model: str, dataset: str, public_size: int | float,
                 model_options: dict | None = None) -> PeersSpec:
    """The spec of a run without --peers-spec: every peer gets --model and --dataset with the dataset's own
    classification task; the public set is held out of CIFAR-10 (of the synthetic set for synthetic runs)."""
    ds = canonical_name(dataset)
    task = ds if ds in TASK_DATASET else "classify"
    entries = [PeerEntry(peer=p, group=0, model=model, task=task, dataset=ds, model_options=dict(model_options or {}))
               for p in range(n_peers)]
    return PeersSpec(peers=entries, public_dataset=_default_public({ds}), public_size=public_size)


def _default_public(datasets: set[str]) -> str:
    """The public set's dataset unless the spec names one: CIFAR-10, or the stand-in every peer uses (tests)."""
    only = next(iter(datasets)) if len(datasets) == 1 else None
    return only if only is not None and only in _stand_ins() else "cifar10"
