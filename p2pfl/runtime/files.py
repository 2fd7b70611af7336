"""The run folder's file writes: atomic replacement (a reader or a crash never sees half a file), appends that
leave no partial line, and strict JSON.

Strict JSON: a float that is not finite is written as the string "NaN", "Infinity" or "-Infinity" (bare NaN and
Infinity are not JSON; jq and JSON.parse reject them); `loads`/`restore_nonfinite` turn those strings back
into floats, and read older files holding the bare words too.
"""
from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

#: How a non-finite float is written, and read back.
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`; the file gets the mode a
    plain open would give it (0o666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


#: Flags of every open of a run folder's file: a link in its place is refused (ELOOP), never followed, so a write
#: lands in the folder or nowhere.
NO_LINK = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_plain(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """os.open of a run folder's file that refuses a link (ELOOP) and anything but a regular file (a FIFO would
    block the open: O_NONBLOCK, which a regular file ignores, lets it through to be refused)."""
    fd = os.open(path, flags | NO_LINK | os.O_NONBLOCK, mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file, refused")
    return fd


def not_plain(folder: str | os.PathLike) -> list[Path]:
    """Every entry under `folder` (itself excluded) that is neither a regular file nor a folder: a symbolic link
    (dangling or not), a FIFO, a socket, a device; found by lstat, never following a link."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in (*dirs, *files):
            path = Path(root, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                found.append(path)
    return sorted(found)


def refuse_not_plain(folder: str | os.PathLike, option: str) -> None:
    """ValueError naming what in `folder` is not a regular file or folder (a link, a FIFO), for `option`: a run
    writes its lock, records, checkpoints and plots in its folder, and none of them may land elsewhere or block."""
    odd = not_plain(folder)
    if odd:
        shown = ", ".join(str(p.relative_to(folder)) for p in odd[:5])
        more = f" and {len(odd) - 5} more" if len(odd) > 5 else ""
        raise ValueError(f"{option} {folder}: refused, it holds {len(odd)} entr{'y' if len(odd) == 1 else 'ies'} "
                         f"other than regular files and folders (links, FIFOs), and a run writes only inside its "
                         f"folder: {shown}{more}")


def strict(obj: Any) -> Any:
    """`obj` with every non-finite float (numpy's too) replaced by its NONFINITE name."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else ("NaN" if obj != obj else "Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if type(obj).__module__ == "numpy":
        return strict(jsonable(obj))
    return obj


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON text of `obj` (non-finite floats as NONFINITE names; see jsonable for other objects)."""
    try:
        return json.dumps(obj, indent=indent, default=jsonable, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: the slower walk only then
        return json.dumps(strict(obj), indent=indent, default=jsonable, allow_nan=False)


def restore_nonfinite(obj: Any) -> Any:
    """Decoded JSON with the NONFINITE names turned back into floats."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: restore_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [restore_nonfinite(v) for v in obj]
    return obj


def loads(text: str) -> Any:
    """JSON as the run folder writes it: NONFINITE names (and older files' bare NaN, Infinity) as floats."""
    return restore_nonfinite(json.loads(text))


def save_array(path: str | os.PathLike, array: Any) -> None:
    """A numpy array as a .npy file at `path`, replaced atomically."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array))
    write_atomic(path, buffer.getvalue())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as indented strict JSON, replacing `path` atomically."""
    write_atomic(path, dumps(obj, indent=2) + "\n")


def jsonable(obj: Any) -> Any:
    """What json.dumps cannot encode itself, made encodable: numpy scalars and arrays as Python values, else str."""
    try:
        import numpy as np
        if isinstance(obj, np.generic):
            return strict(obj.item())
        if isinstance(obj, np.ndarray):
            return strict(obj.tolist())
    except ImportError:  # pragma: no cover
        pass
    return str(obj)


class JsonLines:
    """An append-only JSON-lines log: each record is one line, written by one write on an O_APPEND descriptor (in
    the operating system's hands at once: a killed process loses no record); a write that fails (disk full) is cut
    back to the file's previous end, so no partial line stays. Synced to the disk by `sync` and `close`, not after
    every record: on a cluster's network filesystem an fsync is a round trip to its servers, one a round."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd = open_plain(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def write(self, record: dict) -> None:
        """Append `record` as one line, or leave the file as it was and raise OSError."""
        data = (dumps(record) + "\n").encode()
        end = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"{self.path}: wrote {written} of {len(data)} bytes (disk full?)")
        except OSError:
            os.ftruncate(self._fd, end)
            raise

    def sync(self) -> None:
        """Every record written so far on the disk (fsync)."""
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        """Sync and close the file (once)."""
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = -1
