"""`p2pfl.simulate(**options)`: one run in this process, as `python -m p2pfl.run` runs it, returned as a Run.

The options are the command line's with underscores (`simulate(algorithm="consensus", peers=8, rounds=5)`; a YAML
file as `config=`; plug-ins as `plugins=["my_scheme.py"]`, imported first), parsed, validated and resolved by the
same functions, run by the same `p2pfl.run.execute`, into the same run folder (`out`, default runs/). Without mpirun
the process holds every peer; torch's threads and determinism flags are put back afterwards. Bad input raises a
ValueError (`p2pfl.runtime.failure.UserError`) whose message is the line the command line prints after
"p2pfl: error: "; nothing calls sys.exit. `quiet=True` (or `verbose=False`) shows warnings and errors only: no
banner, placement table, progress or summary (the returned Run holds them all); `verbose=True` shows debug
messages too (p2pfl.runtime.console). The caller's logging is left as it was found.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.runs import Run


#: What the summary's whole time counts under simulate.
WHOLE_CALL = "this simulate() call {:.1f} s (set-up and plots too; imports before the call not counted)"


def simulate(**options: Any) -> Run:
    """Run one job in-process with `options` (p2pfl.run's, underscores for dashes) and return its run folder read
    back (analysis.runs.Run: `.rounds`, `.evals`, `.summary`, `.frame()`). Under mpirun every rank calls it."""
    from analysis.runs import load_run
    from p2pfl.comm.world import World
    from p2pfl.config import from_options
    from p2pfl.run import execute, resolved
    from p2pfl.runtime.console import console, verbosity
    from p2pfl.runtime.device import kept_torch_settings
    from p2pfl.runtime.failure import agree, raising_user_errors

    started = time.time()  # as main's: the set-up time the summary records leaves the imports aside
    if options.get("print_config"):
        raise ValueError("--print-config: simulate runs the configuration; print it with "
                         "p2pfl.config.to_yaml(p2pfl.config.make_config(...))")
    options = dict(options)
    level = verbosity(options.pop("quiet", None), options.pop("verbose", None))
    world = World.detect()
    with console(world.rank, level), raising_user_errors(), kept_torch_settings():
        run, _ = agree(world, lambda: resolved(world, from_options(options)))
        run_dir = execute(world, run, started, whole=(WHOLE_CALL, started))
    world.barrier()  # every rank reads the folder once rank 0 has finished writing it
    return load_run(run_dir)
