"""Checkpoints of a run: one file per peer (so a run can resume on any number of ranks) and a state file.

The state file is written by rank 0 after every rank has written its peers' files, so it only ever names a
round whose peer files are all complete. Every file is replaced atomically.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from p2pfl.runtime.files import write_atomic


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
