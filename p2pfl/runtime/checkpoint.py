"""Checkpoints of a run: one file per peer (so a run can resume on any number of ranks) and a state file.

A peer's file holds its record (`p2pfl.algorithms.peer`) field by field: objects with `state_dict` (modules,
optimisers, the data cursor, model pools) by their state dict, RNG generators by their state, tensors and plain
values as they are. Fields marked not to checkpoint are skipped. The state file is written by rank 0 after every
rank has written its peers' files, so it only ever names a round whose peer files are all complete. Every file
is replaced atomically.
"""
from __future__ import annotations

import io
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from p2pfl.runtime.files import write_atomic

CHECKPOINT = "checkpoint"


def _saved(value: Any) -> Any:
    if isinstance(value, torch.Generator):
        return value.get_state()
    if hasattr(value, "state_dict"):
        return value.state_dict()
    return value


def _restored(current: Any, saved: Any, device: torch.device) -> Any:
    if isinstance(current, torch.Generator):
        current.set_state(saved.cpu())
        return current
    if hasattr(current, "load_state_dict"):
        current.load_state_dict(saved)
        return current
    if isinstance(saved, torch.Tensor):
        return saved.to(device)
    return saved


def record_state(record: Any) -> dict[str, Any]:
    """Everything of a peer record that a checkpoint keeps, by field name."""
    return {f.name: _saved(getattr(record, f.name)) for f in fields(record) if f.metadata.get(CHECKPOINT, True)}


def restore_record(record: Any, state: dict[str, Any], device: torch.device, source: str = "checkpoint") -> None:
    """Load what `record_state` saved back into a freshly set-up record of the same method."""
    for f in fields(record):
        if not f.metadata.get(CHECKPOINT, True):
            continue
        if f.name not in state:
            raise ValueError(f"--resume: {source} has no '{f.name}' (a checkpoint of another method?)")
        setattr(record, f.name, _restored(getattr(record, f.name), state[f.name], device))


def _peer_path(run_dir: Path, peer: int) -> Path:
    return Path(run_dir) / "checkpoint" / f"peer-{peer:05d}.pt"


def save_peer(run_dir: Path, peer: int, round: int, state: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save({"round": round, "state": state}, buf)
    write_atomic(_peer_path(run_dir, peer), buf.getvalue())


def load_peer(run_dir: Path, peer: int, round: int, device: torch.device) -> dict[str, Any]:
    blob = torch.load(_peer_path(run_dir, peer), map_location=device, weights_only=False)
    if blob["round"] != round:
        raise ValueError(f"--resume: checkpoint of peer {peer} is from round {blob['round']}, expected {round}")
    return blob["state"]


def save_state(run_dir: Path, round: int, n_peers: int) -> None:
    write_atomic(Path(run_dir) / "checkpoint" / "state.json", json.dumps({"round": round, "peers": n_peers}))


def load_state(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "checkpoint" / "state.json").read_text())
