"""Checkpoints of a run: one file per peer (so a run can resume on any number of ranks) and a state file.

A peer's file holds its record (`p2pfl.algorithms.peer`) field by field: objects with `state_dict` (modules,
optimisers, the data cursor, model pools) by their state dict, random generators by their state, tensors and
plain values as they are. Fields marked not to checkpoint are skipped. The file holds nothing but tensors and
plain values (`p2pfl.runtime.plain`) and is read with `torch.load(weights_only=True)`, so a file crafted to run
code on loading is refused, never run. Peer files carry their round in their name; the state file is written by
rank 0 after every rank has written its peers' files, names that round, and only then are older rounds' files
removed. So a job killed while writing a checkpoint leaves the previous one whole and named by the state file.
Every file is written atomically. The state file records the sha256 digest of every peer file, and a resume checks
them (`verify_checkpoint`, before the run folder is touched, and again as each file is read). A truncated, damaged,
foreign or refused file, or one whose values do not have the form of this run's records, is a one-line error
naming it.
"""
from __future__ import annotations

import hashlib
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
    MAX_DEPTH,
    NOT_A_GENERATOR,
    TooDeep,
    check_plain,
    generator_state,
    misfit,
    numpy_like,
    set_generator_state,
    to_plain,
)

CHECKPOINT = "checkpoint"
#: A field's metadata key: saved only once it differs from its default, and a checkpoint without it restores the
#: default. For state that only some runs use (DP-SGD's step count), so the others' checkpoints stay as they were.
WHEN_SET = "when_set"
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
    state = {f.name: _saved(getattr(record, f.name)) for f in fields(record) if f.metadata.get(CHECKPOINT, True)
             and not (f.metadata.get(WHEN_SET) and getattr(record, f.name) == f.default)}
    check_plain(state, type(record).__name__)
    return state


def restore_record(record: Any, state: dict[str, Any], device: torch.device, source: str = "checkpoint") -> None:
    """Load what `record_state` saved back into a freshly set-up record of the same method; ValueError (one line,
    naming `source`, the file) when a field is missing or has another form than the fresh record's."""
    optional = {f.name for f in fields(record) if f.metadata.get(WHEN_SET)}
    kept = [f.name for f in fields(record) if f.metadata.get(CHECKPOINT, True)
            and (f.name in state or f.name not in optional)]  # an unsaved WHEN_SET field keeps its default
    for name in kept:
        if name not in state:
            raise ValueError(f"--resume: {source} has no '{name}' (a checkpoint of another method?)")
        wrong = misfit(state[name], _saved(getattr(record, name)), name)
        if wrong is not None:
            raise ValueError(f"--resume: {source}: {wrong} (a checkpoint of another run?)")
    for name in kept:
        try:
            setattr(record, name, _restored(getattr(record, name), state[name], device))
        except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as exc:  # a state dict that does not fit
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ValueError(f"--resume: {source}: '{name}' does not fit this run's ({detail})") from None


def peer_path(run_dir: Path, peer: int, round: int) -> Path:
    """The checkpoint file of `peer` at `round`."""
    return Path(run_dir) / "checkpoint" / f"peer-{peer:05d}.r{round:06d}.pt"


def _state_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoint" / "state.json"


def save_peer(run_dir: Path, peer: int, round: int, state: dict[str, Any]) -> str:
    """Write the checkpoint file of `peer` at `round`; returns its sha256 digest (hex), for the state file."""
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "peer": peer, "round": round, "state": state}, buf)
    data = buf.getvalue()
    write_atomic(peer_path(run_dir, peer, round), data)
    return hashlib.sha256(data).hexdigest()


def _read_peer_file(path: Path, round: int, sha256: str | None) -> bytes:
    """The bytes of a peer file; ValueError naming it when it is missing or its digest is not `sha256`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"--resume: {path} is missing (the checkpoint of round {round} is incomplete)") from None
    except OSError as exc:
        raise ValueError(f"--resume: {path} cannot be read ({type(exc).__name__})") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"--resume: {path} does not match the sha256 digest that checkpoint/state.json records "
                         "for it (damaged or changed after it was written)")
    return data


def load_peer(run_dir: Path, peer: int, round: int, device: torch.device,
              sha256: str | None = None) -> dict[str, Any]:
    """The state of `peer` saved at `round`; ValueError (one line, naming the file) if it is missing, differs from
    its recorded `sha256` digest (when given), is truncated, not this peer's checkpoint, or holds anything but
    tensors and plain values nested at most MAX_DEPTH deep (read without running code)."""
    path = peer_path(run_dir, peer, round)
    data = _read_peer_file(path, round, sha256)
    refused = ValueError(f"--resume: {path} holds objects other than tensors and plain values (refused: loading it "
                         "could run code; written by an older p2pfl, or not by p2pfl)")
    try:
        blob = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except pickle.UnpicklingError:  # what the weights-only unpickler raises for anything it would have to call
        raise refused from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user-facing error
        raise ValueError(f"--resume: {path} is not a readable p2pfl checkpoint (truncated or corrupt: "
                         f"{type(exc).__name__})") from None
    try:
        check_plain(blob, "checkpoint")  # no set, bytes, torch.Size...: what record_state never writes
    except TooDeep:
        raise ValueError(f"--resume: {path} is not a p2pfl checkpoint (containers nested deeper than "
                         f"{MAX_DEPTH} levels)") from None
    except TypeError:
        raise refused from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT or blob.get("peer") != peer:
        raise ValueError(f"--resume: {path} is not a p2pfl checkpoint of peer {peer}")
    if blob["round"] != round:
        raise ValueError(f"--resume: {path} is from round {blob['round']}, expected {round}")
    return blob["state"]


def save_state(run_dir: Path, round: int, n_peers: int, digests: dict[int, str],
               extra: dict[str, Any] | None = None) -> None:
    """Name `round` as the checkpoint to resume from, with the sha256 `digests` of its peer files (by peer) and the
    runner's `extra` numbers (e.g. the simulated clock), then remove the peer files of every other round."""
    sha256 = {str(peer): digests[peer] for peer in range(n_peers)}
    write_atomic(_state_path(run_dir), json.dumps({"format": FORMAT, "round": round, "peers": n_peers,
                                                   "sha256": sha256, **(extra or {})}))
    for old in (Path(run_dir) / "checkpoint").glob("peer-*.r*.pt"):
        if not old.name.endswith(f".r{round:06d}.pt"):
            old.unlink(missing_ok=True)


def load_state(run_dir: Path) -> dict[str, Any]:
    """The state file; ValueError (one line, naming it) if it is unreadable or not a p2pfl checkpoint's."""
    path = _state_path(run_dir)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"--resume: {path} is not a readable checkpoint state ({type(exc).__name__})") from None
    if (not isinstance(state, dict) or state.get("format") != FORMAT or type(state.get("round")) is not int
            or type(state.get("peers")) is not int or state["peers"] < 1):
        raise ValueError(f"--resume: {path} is not a p2pfl checkpoint state")
    digests = state.get("sha256")
    if digests is not None and not (isinstance(digests, dict) and len(digests) == state["peers"]
                                    and set(digests) == {str(peer) for peer in range(state["peers"])}
                                    and all(isinstance(d, str) for d in digests.values())):
        raise ValueError(f"--resume: {path} is not a p2pfl checkpoint state (its 'sha256' must name the digest of "
                         f"every peer's file, peers 0 to {state['peers'] - 1})")
    return state


def recorded_digest(state: dict[str, Any], peer: int) -> str | None:
    """The sha256 digest the state file records for `peer`'s file (None in a checkpoint of an older p2pfl)."""
    digests = state.get("sha256")
    return None if digests is None else digests[str(peer)]


def verify_checkpoint(run_dir: Path, part: int = 0, parts: int = 1) -> dict[str, Any]:
    """The state file of the run folder's checkpoint once the peer files p with p % parts == part (every rank of a
    job checks its share) match the digests it records; ValueError (one line, naming the file) otherwise.
    Reads only: a resume calls it before anything in the folder is written."""
    state = load_state(run_dir)
    if state.get("sha256") is not None:
        for peer in range(part, state["peers"], parts):
            _read_peer_file(peer_path(run_dir, peer, state["round"]), state["round"], recorded_digest(state, peer))
    return state
