"""Checkpoints of a run: one file per peer (so a run can resume on any number of ranks) and a state file.

A peer's file holds its record (`p2pfl.algorithms.peer`) field by field: objects with `state_dict` (modules,
optimisers, the data cursor, model pools) by their state dict, random generators by their state, tensors and
plain values as they are. Fields marked not to checkpoint are skipped. The file holds nothing but tensors and
plain values (`p2pfl.runtime.plain`) and is read with `torch.load(weights_only=True)`, so a file crafted to run
code on loading is refused, never run. Peer files carry their round in their name; the state file is written by
rank 0 after every rank has written its peers' files, names that round, and only then are older rounds' files
removed. So a job killed while writing a checkpoint leaves the previous one whole and named by the state file.
Every file is written atomically. A truncated, foreign or refused file is a one-line error naming it.
"""
from __future__ import annotations

import io
import json
import pickle
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from p2pfl.runtime.files import write_atomic
from p2pfl.runtime.plain import (
    NOT_A_GENERATOR,
    check_plain,
    generator_state,
    numpy_like,
    set_generator_state,
    to_plain,
)

CHECKPOINT = "checkpoint"
FORMAT = "p2pfl-checkpoint-1"


def _saved(value: Any) -> Any:
    state = generator_state(value)
    if state is not NOT_A_GENERATOR:
        return state
    if hasattr(value, "state_dict"):
        return to_plain(value.state_dict())
    return to_plain(value)


def _restored(current: Any, saved: Any, device: torch.device) -> Any:
    if set_generator_state(current, saved):
        return current
    if hasattr(current, "load_state_dict"):
        current.load_state_dict(saved)
        return current
    if isinstance(current, np.ndarray):
        return numpy_like(saved, current)
    if isinstance(saved, torch.Tensor):
        return saved.to(device)
    return saved


def record_state(record: Any) -> dict[str, Any]:
    """Everything of a peer record that a checkpoint keeps, by field name, as tensors and plain values; a field
    holding anything else is a TypeError naming it (mark it `derived()` or give it a `state_dict`)."""
    state = {f.name: _saved(getattr(record, f.name)) for f in fields(record) if f.metadata.get(CHECKPOINT, True)}
    check_plain(state, type(record).__name__)
    return state


def restore_record(record: Any, state: dict[str, Any], device: torch.device, source: str = "checkpoint") -> None:
    """Load what `record_state` saved back into a freshly set-up record of the same method."""
    for f in fields(record):
        if not f.metadata.get(CHECKPOINT, True):
            continue
        if f.name not in state:
            raise ValueError(f"--resume: {source} has no '{f.name}' (a checkpoint of another method?)")
        setattr(record, f.name, _restored(getattr(record, f.name), state[f.name], device))


def _peer_path(run_dir: Path, peer: int, round: int) -> Path:
    return Path(run_dir) / "checkpoint" / f"peer-{peer:05d}.r{round:06d}.pt"


def _state_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoint" / "state.json"


def save_peer(run_dir: Path, peer: int, round: int, state: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "peer": peer, "round": round, "state": state}, buf)
    write_atomic(_peer_path(run_dir, peer, round), buf.getvalue())


def load_peer(run_dir: Path, peer: int, round: int, device: torch.device) -> dict[str, Any]:
    """The state of `peer` saved at `round`; ValueError (one line, naming the file) if it is missing, truncated,
    not this peer's checkpoint, or holds anything but tensors and plain values (read without running code)."""
    path = _peer_path(run_dir, peer, round)
    if not path.is_file():
        raise ValueError(f"--resume: {path} is missing (the checkpoint of round {round} is incomplete)")
    refused = ValueError(f"--resume: {path} holds objects other than tensors and plain values (refused: loading it "
                         "could run code; written by an older p2pfl, or not by p2pfl)")
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError:  # what the weights-only unpickler raises for anything it would have to call
        raise refused from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user-facing error
        raise ValueError(f"--resume: {path} is not a readable p2pfl checkpoint (truncated or corrupt: "
                         f"{type(exc).__name__})") from None
    try:
        check_plain(blob, "checkpoint")  # no set, bytes, torch.Size...: what record_state never writes
    except TypeError:
        raise refused from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT or blob.get("peer") != peer:
        raise ValueError(f"--resume: {path} is not a p2pfl checkpoint of peer {peer}")
    if blob["round"] != round:
        raise ValueError(f"--resume: {path} is from round {blob['round']}, expected {round}")
    return blob["state"]


def save_state(run_dir: Path, round: int, n_peers: int, extra: dict[str, Any] | None = None) -> None:
    """Name `round` as the checkpoint to resume from (with the runner's `extra` numbers, e.g. the simulated
    clock), then remove the peer files of every other round."""
    write_atomic(_state_path(run_dir), json.dumps({"format": FORMAT, "round": round, "peers": n_peers,
                                                   **(extra or {})}))
    for old in (Path(run_dir) / "checkpoint").glob("peer-*.r*.pt"):
        if not old.name.endswith(f".r{round:06d}.pt"):
            old.unlink(missing_ok=True)


def load_state(run_dir: Path) -> dict[str, Any]:
    """The state file; ValueError (one line, naming it) if it is unreadable or not a p2pfl checkpoint's."""
    path = _state_path(run_dir)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--resume: {path} is not a readable checkpoint state ({type(exc).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT or not isinstance(state.get("round"), int):
        raise ValueError(f"--resume: {path} is not a p2pfl checkpoint state")
    return state
