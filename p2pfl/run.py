"""`python -m p2pfl.run`: one job of K peers on a topology, under mpirun/srun or all in one process."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import topologies
from p2pfl import algorithms
from p2pfl.comm.exchange import Exchange
from p2pfl.comm.placement import Placement
from p2pfl.comm.world import World
from p2pfl.config import ResolvedRun, parse_args, resolve, to_yaml
from p2pfl.records import Host, Seeds
from p2pfl.rounds import Algorithm, RunContext, Runner
from p2pfl.runtime.checkpoint import load_state
from p2pfl.runtime.device import configure_determinism, select_device
from p2pfl.runtime.failure import abort_on_exception, agree
from p2pfl.runtime.manifest import base_manifest
from p2pfl.runtime.progress import placement_table
from p2pfl.runtime.runfolder import RunFolder, make_run_dir


def build_context(world: World, run: ResolvedRun, announce: bool = True) -> RunContext:
    """Graph, weights, device, placement, exchange and run folder for a resolved run; collective."""
    cfg = run.cfg
    n_peers = cfg.peers

    def build_graph():
        params = {"p": cfg.p} if cfg.topology == "random" else {}
        if cfg.topology == "file":
            params = {"path": cfg.graph_file}
        graph = topologies.build(cfg.topology, n_peers, seed=cfg.seed, **params)
        return graph, topologies.mixing_matrix(graph, kind=cfg.mixing)

    graph, W = agree(world, build_graph)
    device = agree(world, lambda: select_device(cfg.device, world.local_rank))
    configure_determinism(cfg.threads, device)
    placement = Placement(n_peers, world.size)
    exchange = Exchange(world, graph, placement, timeout=cfg.timeout, chunk_bytes=cfg.chunk_mb << 20,
                        cuda_aware=cfg.cuda_aware_mpi)
    resume_round = None
    if cfg.resume is not None:
        run_dir = Path(cfg.resume)
        resume_round = load_state(run_dir)["round"]
    else:
        run_dir = Path(world.bcast(str(make_run_dir(cfg)) if world.is_root else None))
    me = Host(rank=world.rank, host=world.host, device=str(device), peers=placement.peers_of(world.rank))
    hosts = world.allgather(me)
    folder = None
    if world.is_root:
        folder = RunFolder(run_dir, cfg, resume_round=resume_round)
        folder.update_manifest(**base_manifest(
            cfg.to_dict(), world.size, hosts, topologies.describe(graph, W),
            seeds=Seeds(seed=cfg.seed, streams="numpy/torch streams keyed by (seed, peer, purpose); "
                                                "see p2pfl.seeding"), method_defaults=cfg.method_defaults()))
        if announce:
            print(f"p2pfl: {cfg.algorithm} on {cfg.topology}, {n_peers} peers on {world.size} rank(s); "
                  f"run folder {run_dir}", flush=True)
            print(placement_table(hosts), flush=True)
    return RunContext(cfg=cfg, world=world, graph=graph, W=np.asarray(W), placement=placement,
                      exchange=exchange, device=device, run_dir=run_dir, folder=folder, spec=run.spec)


def build_algorithm(ctx: RunContext) -> Algorithm:
    """The configured algorithm with its peers set up (bad input ends every rank cleanly)."""
    algorithm = algorithms.get(ctx.cfg.algorithm, peers_spec=ctx.cfg.peers_spec is not None)(ctx)
    agree(ctx.world, algorithm.setup)
    return algorithm


def _run(world: World, argv: Sequence[str] | None) -> int:
    def parse() -> tuple[ResolvedRun, bool]:
        cfg, print_only = parse_args(argv)
        return resolve(cfg, world.size), print_only

    run, print_only = agree(world, parse)
    if print_only:
        if world.is_root:
            print(to_yaml(run.cfg), end="")
        return 0
    ctx = build_context(world, run)
    cfg = run.cfg
    algorithm = build_algorithm(ctx)
    runner = Runner(ctx, algorithm)
    if cfg.resume is not None:
        agree(world, runner.restore)
    runner.run()
    if world.is_root and cfg.plots:
        _plots(ctx.run_dir)
    if ctx.folder is not None:
        ctx.folder.close()
    return 0


def _plots(run_dir: Path) -> None:
    from analysis.plots import plot_run
    from analysis.runs import load_run

    if plot_run(load_run(run_dir)):
        print(f"p2pfl: plots in {run_dir / 'plots'}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: any uncaught exception on any rank ends the whole job with that rank's traceback."""
    world = World.detect()
    try:
        return _run(world, argv)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure must end every rank
        abort_on_exception(world, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
