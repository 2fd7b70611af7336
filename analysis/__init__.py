"""Reading, plotting and comparing p2pfl run folders (layout: docs/CONVENTIONS.md).

- ``load_run(path)``: a run folder as a ``Run`` (works on runs still in progress);
- ``plot_run(run)``: its plots into ``<run>/plots/`` (analysis.plots, imported with matplotlib on first use;
  p2pfl draws them through its post-run hook, analysis.hooks);
- ``frame(paths)``: run and study folders as tidy pandas DataFrames (``Frames``: ``.records``, ``.runs``;
  analysis.frames, imported with pandas on first use);
- ``delta_percent(method, local)``: FedMuscle's per-peer Δ% against local training (SPEC §6);
- ``python -m analysis.report RUN_DIR ...``: the markdown comparison report.
"""
import importlib
from typing import Any

from .delta import Delta, delta_percent, lower_is_better
from .runs import Run, RunFolderError, load_run

__all__ = ["Run", "RunFolderError", "load_run", "plot_run", "Delta", "delta_percent", "lower_is_better", "frame",
           "Frames"]

#: Names imported on first use with their module's heavy libraries (matplotlib; pandas): `import analysis`, and
#: reading run folders, need neither, nor torch.
_LAZY = {"plot_run": ".plots", "frame": ".frames", "Frames": ".frames"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
