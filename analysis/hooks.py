"""What analysis does at the end of a p2pfl run, registered as p2pfl's post-run hook (p2pfl.runtime.hooks):
under --plots, the run's plots into <run>/plots/."""
from __future__ import annotations

import logging
from pathlib import Path

from p2pfl.runtime.hooks import after_run

log = logging.getLogger(__name__)


@after_run("plots")
def draw_plots(run_dir: Path) -> None:
    """Draw every plot the finished run has data for (plot_run) and say where."""
    from .plots import plot_run
    from .runs import load_run

    if plot_run(load_run(run_dir)):
        log.info(f"p2pfl: plots in {run_dir / 'plots'}")
