"""Reading, plotting and comparing p2pfl run folders (layout: docs/CONVENTIONS.md).

- ``load_run(path)``: a run folder as a ``Run`` (works on runs still in progress);
- ``plot_run(run)``: its plots into ``<run>/plots/``;
- ``frame(paths)``: run and study folders as tidy pandas DataFrames (``Frames``: ``.records``, ``.runs``;
  analysis.frames, imported with pandas on first use);
- ``delta_percent(method, local)``: FedMuscle's per-peer Δ% against local training (SPEC §6);
- ``python -m analysis.report RUN_DIR ...``: the markdown comparison report.
"""
from typing import Any

from .delta import Delta, delta_percent, lower_is_better
from .plots import plot_run
from .runs import Run, RunFolderError, load_run

__all__ = ["Run", "RunFolderError", "load_run", "plot_run", "Delta", "delta_percent", "lower_is_better", "frame",
           "Frames"]


def __getattr__(name: str) -> Any:
    if name in ("frame", "Frames"):
        from . import frames

        return getattr(frames, name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
