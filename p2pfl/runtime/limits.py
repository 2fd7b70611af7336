"""Bounds on what input may make a run allocate or loop over, checked before the allocation or the loop.

A size read from a file (an array's header, a label, a JSON document's depth) or given as a number on the command
line is checked here first, so a hostile or mistaken input is one line naming it and its limit, never a
multi-terabyte allocation or a loop that outlives every deadline.

The memory budget is `P2PFL_MAX_BYTES` (bytes) when set, else half of the memory the system says is available,
and never more than the address-space limit (`ulimit -v`) when one is set.
"""
from __future__ import annotations

import math
import os
import resource
import stat
import zipfile
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:  # numpy is imported where an array is read: the options' checks use this module without it
    import numpy as np

#: The environment variable naming the memory budget in bytes.
MAX_BYTES_ENV = "P2PFL_MAX_BYTES"
#: The share of the available memory an input may take when P2PFL_MAX_BYTES is not set.
AVAILABLE_SHARE = 0.5
#: What reading a damaged or hostile zip archive raises besides OSError, EOFError and ValueError: a bad archive or
#: CRC, a corrupt deflate stream, a compression method zipfile lacks, an encrypted member.
ZIP_FAULTS: tuple[type[Exception], ...] = (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError)


def _available_bytes() -> int:
    """The memory the system says is available (MemAvailable; the physical memory where /proc is absent)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def max_bytes() -> int:
    """The memory budget of one input (bytes): P2PFL_MAX_BYTES, else a share of the available memory, capped by
    the address-space limit."""
    given = os.environ.get(MAX_BYTES_ENV)
    if given is not None:
        try:
            budget = int(float(given))
        except ValueError:
            raise ValueError(f"{MAX_BYTES_ENV}={given!r}: not a number of bytes") from None
        if budget <= 0:
            raise ValueError(f"{MAX_BYTES_ENV}={given!r}: must be a positive number of bytes")
    else:
        budget = int(AVAILABLE_SHARE * _available_bytes())
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        budget = min(budget, soft // 2)
    return budget


def human(n: float) -> str:
    """Bytes as a short human figure (1.5 GiB)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


def check_bytes(what: str, n_bytes: int | float, budget: int | None = None) -> None:
    """ValueError naming `what` when `n_bytes` exceed the memory budget (max_bytes unless given)."""
    budget = max_bytes() if budget is None else budget
    if n_bytes > budget:
        raise ValueError(f"{what}: would take {human(n_bytes)}, over the memory budget of {human(budget)} "
                         f"(set {MAX_BYTES_ENV} to allow more)")


def check_count(what: str, n: int | float, cap: int | float, unit: str = "") -> None:
    """ValueError naming `what` when `n` exceeds `cap`."""
    if n > cap:
        unit = f" {unit}" if unit else ""
        raise ValueError(f"{what}: {n:g}{unit}, over the limit of {cap:g}{unit}")


def npy_header(f: BinaryIO) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an .npy stream's header declares, read without the data after it (the stream is left at
    the data's start), so the array's size is checked before `np.load` allocates it; ValueError when the stream
    does not start with an .npy header of version 1.0 or 2.0 (what np.save writes for every plain dtype)."""
    from numpy.lib import format as npy

    version = npy.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = npy.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = npy.read_array_header_2_0(f)
    else:
        raise ValueError(f".npy format version {version[0]}.{version[1]} is not read (1.0 and 2.0 are)")
    if any(d < 0 for d in shape):
        raise ValueError(f"its .npy header declares a negative dimension, shape {shape}")
    return shape, dtype


def array_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The bytes an array of `shape` and `dtype` takes (exact: Python integers never overflow)."""
    return math.prod(shape) * dtype.itemsize


def npz_headers(path: str | os.PathLike) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each array of an .npz archive by name (as np.load names it, without ".npy") with the shape and dtype its
    header declares, read without the data; members that are no .npy file are left out (np.load reads them as
    bytes, which no reader here asks for). zipfile.BadZipFile or ValueError when the file is not such an archive."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.filename.endswith(".npy"):
                with z.open(info) as f:
                    out[info.filename[:-4]] = npy_header(f)
    return out


def load_npz(path: str | os.PathLike, what: str, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays `names` (default: every .npy member) of the .npz archive at `path` that it holds, read with
    ``allow_pickle=False`` only after their headers passed: each array no larger than its member's data (a header
    may claim any shape, and np.load allocates the claim before reading), all of them together within the memory
    budget (ValueError naming `what`). zipfile.BadZipFile when the file is no zip archive."""
    with zipfile.ZipFile(path) as z:
        members = {i.filename[:-4]: i for i in z.infolist() if i.filename.endswith(".npy")}
        wanted = list(members) if names is None else [n for n in names if n in members]
        claimed = {}
        for name in wanted:
            with z.open(members[name]) as f:
                shape, dtype = npy_header(f)
                claimed[name] = (shape, dtype, array_bytes(shape, dtype), members[name].file_size - f.tell())
    total = sum(c[2] for c in claimed.values())
    largest = max(claimed, key=lambda n: claimed[n][2], default="")
    if largest:
        shape, dtype = claimed[largest][:2]
        check_bytes(f"{what}: its arrays (by their headers; the largest, {largest}: shape {shape} of {dtype})", total)
    for name, (shape, dtype, n_bytes, stored) in claimed.items():
        if n_bytes > stored:
            raise ValueError(f"{what}: array {name}'s header declares shape {shape} of {dtype} ({human(n_bytes)}), "
                             f"its file holds {human(max(stored, 0))} of data")
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in wanted}


def check_file_size(what: str, path: str | os.PathLike, cap: int, why: str = "") -> None:
    """ValueError naming `what` (and `why` the limit is `cap`) when the file at `path` is larger than `cap` bytes,
    or no regular file (a device or a pipe has no size to check: /dev/zero never ends); checked before it is read.
    OSError when it cannot be read."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what}: not a regular file")
    size = st.st_size
    if size > cap:
        raise ValueError(f"{what}: {human(size)}, over the limit of {human(cap)}{' ' + why if why else ''}")
