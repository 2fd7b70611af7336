"""Atomic file writes: a reader (or a crash) never sees half a file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=jsonable) + "\n")


def jsonable(obj: Any) -> Any:
    """What json.dumps cannot encode itself, made encodable: numpy scalars and arrays as Python values, else str."""
    try:
        import numpy as np
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(obj)


class JsonLines:
    """An append-only JSON-lines log; each record is one line, flushed and synced as it is written."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fh = open(self.path, "a", buffering=1)

    def write(self, record: dict) -> None:
        self._fh.write(json.dumps(record, default=jsonable) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()
