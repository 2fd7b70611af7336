"""--log: the run's records mirrored into experiment trackers, TensorBoard and Weights & Biases.

RunFolder (rank 0) hands every record it writes to metrics.jsonl to `Loggers`, so whatever writes records (the
synchronous runner, asynchronous gossip, a resumed run, summarised records) is mirrored alike: the record's
numbers as scalars at step = its round, tagged by what they measure (`scalars`: train/, eval/, comm/, time/,
network/; bookkeeping left out; each peer's own under peers/ with --log-peers), the resolved configuration as
hyper-parameters at the start, plots/*.png as images at the end. A study's point (its run folder STUDY/runs/NAME
beside STUDY/plan.json) is a W&B run grouped by the study, with its axes as tags and config (`study_identity`).
Both write inside the run folder and need no network (W&B runs offline unless WANDB_MODE says otherwise). A
tracker that fails, at its start or later, is dropped with one warning line: the run and metrics.jsonl go on as
they would without it.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from p2pfl.records import BOOKKEEPING, COUNT, STATS, TIMING_FIELDS, numeric_leaves

log = logging.getLogger(__name__)

#: The trackers --log may name (comma-separated; p2pfl.config.log_names reads the value).
LOGGERS = ("tensorboard", "wandb")
#: The run folder's subfolder of TensorBoard's event files; W&B's offline runs go to <run>/wandb/offline-run-*.
TENSORBOARD_DIR = "tensorboard"
#: W&B's project unless WANDB_PROJECT names another.
WANDB_PROJECT = "p2pfl"
#: The longest tag W&B accepts (a longer one fails wandb.init): a longer axis=label tag is cut (the config keeps it).
WANDB_TAG_CHARS = 64


#: The simulated clock's keys begin so (p2pfl.records.SIM_TIME, SIM_ROUND, ...): time/.
SIM_PREFIX = "sim_"
#: Where a round record's top-level key goes (the others measure training: train/).
TAG_GROUPS = {"network": "network", "active_count": "network", **dict.fromkeys(TIMING_FIELDS, "time")}


def bookkeeping(name: str) -> bool:
    """An eval metric that counts or indexes rather than measures (p2pfl.records.BOOKKEEPING, `*_count`)."""
    return name in BOOKKEEPING or name.endswith(COUNT)


def tag(kind: str, path: tuple[str, ...]) -> str | None:
    """The tag of a record's number at key `path` (not a peer's own), None for one left out: eval metrics as
    eval/<name> (no metrics/ level; bookkeeping out; a summarised evaluation's spread over the peers as
    eval/<name>_peer_std, its mean, min and max being the _peer_* metrics already), and a round's under time/
    (timings, the simulated clock), comm/ (bytes), network/ (the round's network) or train/ (loss, consensus
    distance, the method's own); a statistic's peer count is bookkeeping too."""
    head = path[0]
    if len(path) > 1 and path[-2].endswith(STATS) and path[-1] == "count":
        return None
    if kind == "eval":
        if head == "metrics":
            return None if bookkeeping(path[1]) else f"eval/{path[1]}"
        if head == "per_peer_stats":
            return f"eval/{path[1]}_peer_std" if path[-1] == "std" else None
        return "eval/" + "/".join(path)
    if head == "network":
        return "network/" + "/".join(path[1:])
    group = TAG_GROUPS.get(head) or ("time" if head.startswith(SIM_PREFIX) else
                                     "comm" if head.startswith("bytes_") else "train")
    return f"{group}/" + "/".join(path)


def peer_tag(path: tuple[str, ...], peer: int) -> str:
    """The tag of one peer's own number (--log-peers): peers/<metric>/<peer>, the metric its record key (a round's
    network degree: degree; an evaluation's: its metric's name)."""
    name = path[-1] if path[0] in ("network", "per_peer") else "/".join(path)
    return f"peers/{name}/{peer}"


def scalars(record: Mapping[str, Any], peers: bool = False) -> dict[str, float]:
    """A record's numbers as tracker scalars (`tag`): every int and float (non-finite ones too) but `round`, which
    is the step, and bookkeeping; with `peers`, each peer's own numbers as well (`peer_tag`); lists, strings,
    flags and None are left out."""
    kind = str(record["type"])
    body = {key: value for key, value in record.items() if key not in ("type", "round")}
    out = {}
    for path, peer, value in numeric_leaves(body):
        name = tag(kind, path) if peer is None else peer_tag(path, peer) if peers else None
        if name is not None:
            out[name] = value
    return out


def study_identity(run_dir: Path) -> dict[str, Any] | None:
    """Who a study's point is, from its study's plan.json (the run folder is STUDY/runs/NAME, however the point
    was launched): {"study", "point", "job_type" (tuning or point), "axes": {axis: label}}; None for a run outside
    a study, or a plan that cannot be read."""
    plan_file = run_dir.parent.parent / "plan.json"
    if run_dir.parent.name != "runs" or not plan_file.is_file():
        return None
    try:
        plan = json.loads(plan_file.read_text())
        tuning = {p["name"]: p for p in plan.get("tuning", [])}
        point = tuning.get(run_dir.name) or next(p for p in plan["points"] if p["name"] == run_dir.name)
        return {"study": str(plan["name"]), "point": run_dir.name,
                "job_type": "tuning" if run_dir.name in tuning else "point",
                "axes": {str(k): str(v) for k, v in point["axes"].items()}}
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None


def wandb_options(run_dir: Path, config: Mapping[str, Any]) -> dict[str, Any]:
    """wandb.init's grouping of the run: a study's point is grouped by its study, its job type tuning or point,
    its axes as tags (axis=label) and as config (`study`: the identity beside the options); any other run has
    job type run and the configuration alone."""
    who = study_identity(run_dir)
    if who is None:
        return {"name": run_dir.name, "job_type": "run", "config": dict(config)}
    return {"name": run_dir.name, "group": who["study"], "job_type": who["job_type"],
            "tags": [f"{axis}={label}"[:WANDB_TAG_CHARS] for axis, label in who["axes"].items()],
            "config": {**config, "study": who}}


def hparam_values(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The configuration as TensorBoard hyper-parameters accept it: None as 'none', a list (the plug-ins) as its
    items joined by commas, anything else not a bool, number or string as its str."""
    return {key: "none" if value is None else value if isinstance(value, (bool, int, float, str))
            else ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            for key, value in config.items()}


class Logger(Protocol):
    """One tracker: scalars at a step, the plots as images at the end, closed once."""

    def scalars(self, values: Mapping[str, float], step: int) -> None: ...

    def images(self, paths: Sequence[Path], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardLogger:
    """Event files in <run>/tensorboard (torch.utils.tensorboard), flushed after every record, so a crashed run's
    events are on disk up to its last record; a resumed run purges what followed its checkpoint, as
    metrics.jsonl is truncated."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any], first_step: int) -> None:
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb  # keeps bools bools, unlike torch's
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / TENSORBOARD_DIR), purge_step=first_step or None)
        self.writer.file_writer.add_summary(hparams_pb(hparam_values(config)))
        self.writer.flush()

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def images(self, paths: Sequence[Path], step: int) -> None:
        """The PNG files as they are (no decoding and re-encoding), tagged plots/<name>."""
        from PIL import Image
        from tensorboard.compat.proto.summary_pb2 import Summary

        for path in paths:
            with Image.open(path) as image:
                (width, height), channels = image.size, len(image.getbands())
            picture = Summary.Image(height=height, width=width, colorspace=channels,
                                    encoded_image_string=path.read_bytes())
            self.writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=f"plots/{path.stem}",
                                                                             image=picture)]), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """A W&B run in <run>/wandb: offline unless WANDB_MODE is set (then W&B's own choice), its configuration the
    resolved one, its history the scalars at step = round, without capturing the console or sampling the
    machine."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any], first_step: int) -> None:
        import wandb

        self.wandb = wandb
        mode = os.environ.get("WANDB_MODE") or "offline"  # read now: W&B reads the environment once a process
        self.run = wandb.init(dir=str(run_dir), **wandb_options(run_dir, config),
                              project=os.environ.get("WANDB_PROJECT", WANDB_PROJECT), reinit="create_new",
                              settings=wandb.Settings(mode=mode, silent=True, console="off", x_disable_stats=True))

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        self.run.log(dict(values), step=step)

    def images(self, paths: Sequence[Path], step: int) -> None:
        self.run.log({f"plots/{path.stem}": self.wandb.Image(str(path)) for path in paths}, step=step)

    def close(self) -> None:
        self.run.finish()


#: What starts each tracker: (run folder, configuration, first step) -> Logger.
STARTERS: dict[str, Callable[[Path, Mapping[str, Any], int], Logger]] = {
    "tensorboard": TensorBoardLogger, "wandb": WandbLogger}


def _warn(message: str) -> None:
    log.warning(message)


def _reason(exc: BaseException) -> str:
    """An exception on one short line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


class Loggers:
    """The run's trackers, fed by RunFolder (rank 0): one that fails to start, or raises later, is dropped with one
    warning line and the others go on."""

    def __init__(self, names: Sequence[str], run_dir: Path, config: Mapping[str, Any], first_step: int = 0,
                 warn: Callable[[str], None] = _warn) -> None:
        self.warn = warn
        self.peers = bool(config.get("log_peers"))
        self.step = first_step  # the last step logged: the plots' step
        self.active: dict[str, Logger] = {}
        for name in names:
            try:
                self.active[name] = STARTERS[name](Path(run_dir), config, first_step)
            except Exception as exc:  # noqa: BLE001 - a tracker never fails the run
                warn(f"--log {name}: not started ({_reason(exc)}); the run goes on without it")

    def record(self, record: Mapping[str, Any]) -> None:
        """Mirror one metrics.jsonl record at step = its round."""
        if not self.active:
            return
        values, step = scalars(record, self.peers), int(record["round"])
        self.step = max(self.step, step)
        self._each("log a record", lambda logger: logger.scalars(values, step))

    def images(self, paths: Sequence[Path]) -> None:
        """The plots, at the last step logged."""
        if paths:
            self._each("log the plots", lambda logger: logger.images(paths, self.step))

    def close(self) -> None:
        self._each("close", lambda logger: logger.close())
        self.active.clear()

    def _each(self, what: str, call: Callable[[Logger], None]) -> None:
        for name, logger in list(self.active.items()):
            try:
                call(logger)
            except Exception as exc:  # noqa: BLE001 - a tracker never fails the run
                del self.active[name]
                self.warn(f"--log {name}: disabled, it failed to {what} ({_reason(exc)}); the run goes on without it")
                if what != "close":
                    try:
                        logger.close()
                    except Exception:  # noqa: BLE001, S110 - already reported
                        pass
