"""`python -m p2pfl.run`: one job of K peers on a topology, under mpirun/srun or all in one process."""
from __future__ import annotations

from p2pfl.runtime.preemption import COMMAND_LINE_SIGNALS, ROUND_FORCED, SETUP_FORCED, SETUP_STOP_GRACE_S, STOP

if __name__ == "__main__":  # first: a stop signal during the imports below ends the run as cleanly as one later
    STOP.install(COMMAND_LINE_SIGNALS)
    STOP.watch(SETUP_STOP_GRACE_S, SETUP_FORCED)  # a set-up step computing at length ends soon after a signal

import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import networkx as nx
import numpy as np

import topologies
from p2pfl import algorithms, plugins
from p2pfl.byzantine import Robust, choose_byzantine
from p2pfl.capabilities import HANDS_OVER, MIXES_BY_W
from p2pfl.cli import parse_args
from p2pfl.comm.placement import Placement
from p2pfl.comm.transport import Transport
from p2pfl.comm.world import World
from p2pfl.config import ResolvedRun, RunConfig, resolve, to_yaml
from p2pfl.context import RunContext
from p2pfl.curious.observer import watch
from p2pfl.gossip import CheckedExchange, Gossip, compress
from p2pfl.gossip.codec import Codec
from p2pfl.gossip.compress.base import Compressor, scheme_capabilities
from p2pfl.gossip.compress.records import Compression, describe
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import PLAIN_MIX
from p2pfl.method import Algorithm
from p2pfl.modes import MODES
from p2pfl.network import NetworkSchedule, topology_options
from p2pfl.network import clock as network_clock
from p2pfl.network.mixing_measures import mixing_measures
from p2pfl.network.schedule import NetworkOptions
from p2pfl.network.schedule_measures import schedule_measures
from p2pfl.records import Host, Seeds
from p2pfl.runtime import console
from p2pfl.runtime.allocator import keep_freed_memory
from p2pfl.runtime.banner import banner_lines, run_setup
from p2pfl.runtime.checkpoint import verify_checkpoint
from p2pfl.runtime.device import configure_determinism, select_device
from p2pfl.runtime.failure import USER_ERROR_EXIT, UserExit, abort_on_exception, agree
from p2pfl.runtime.hooks import run_hooks
from p2pfl.runtime.manifest import base_manifest
from p2pfl.runtime.precision import precision
from p2pfl.runtime.preemption import PREEMPTED_EXIT, hold_for_signal, signalled, stop_signals
from p2pfl.runtime.progress import placement_table, process_started, summary_lines
from p2pfl.runtime.runfolder import RunFolder, make_run_dir
from p2pfl.runtime.runlock import RunLock

log = logging.getLogger("p2pfl.run")  # __name__ is __main__ under python -m p2pfl.run


def compressor(cfg: RunConfig) -> Codec | None:
    """The codec of the gossip mix's messages (--compress, built from its options), None for dense messages."""
    codec = compress.make(cfg)
    return None if "dense" in codec.capabilities else codec


def compression_record(cfg: RunConfig, algorithm: Algorithm, codec: Codec | None) -> Compression | None:
    """manifest["compression"]: the run's codec, its parameters and one message's bytes on the method's mixed
    vector (with the consensus step γ of a scheme with its own error feedback); None for dense messages."""
    if codec is None:
        return None
    assert isinstance(codec, Compressor), f"--compress {cfg.compress}: a codec that is not a Compressor"
    mixed = algorithm.mixed_vector()
    assert mixed is not None, f"--compress: {cfg.algorithm} has no mixed vector"
    feedback = "error-feedback" in scheme_capabilities().get(cfg.gossip, frozenset())
    return describe(codec, cfg.consensus_step if feedback else None, *mixed)


def build_context(world: World, run: ResolvedRun, announce: bool = True) -> RunContext:
    """Graph, weights, device, placement, exchange and run folder for a resolved run; collective."""
    cfg = run.cfg
    n_peers = cfg.peers
    graph, schedule, described = agree(world, lambda: build_network(cfg, described=world.is_root))
    scheme = agree(world, lambda: SCHEMES.get(cfg.gossip).from_config(cfg))
    clock = (agree(world, lambda: network_clock.build(network_clock.ClockOptions.of(cfg), n_peers, schedule.stragglers))
             if cfg.clock else None)
    device = agree(world, lambda: select_device(cfg.device, world.local_rank))
    configure_determinism(cfg.threads, device)
    allocator = keep_freed_memory()
    placement = Placement(n_peers, world.size)
    transport = Transport(world, graph, placement, timeout=cfg.timeout, chunk_bytes=cfg.chunk_mb << 20,
                          cuda_aware=cfg.cuda_aware_mpi)
    transport.stats.track_links = clock is not None  # per-link bytes: what the simulated clock times
    checked = CheckedExchange(transport, world, reject_nonfinite=cfg.on_nonfinite == "rollback")
    robust = agree(world, lambda: Robust.from_config(cfg, choose_byzantine(cfg.byzantine, n_peers, cfg.seed), n_peers))
    run_dir, lock, resume_round = open_run_dir(world, cfg)
    me = Host(rank=world.rank, host=world.host, device=str(device), peers=placement.peers_of(world.rank))
    hosts = world.allgather(me)
    folder = None
    if world.is_root:
        folder = RunFolder(run_dir, cfg, resume_round=resume_round, lock=lock)  # resumed: started in execute
        folder.update_manifest(**base_manifest(
            cfg.to_dict(), world.size, hosts, described,
            {**schedule.describe(), "byzantine": sorted(robust.byzantine),
             "attack": cfg.attack if robust.byzantine else None, "aggregator": cfg.aggregator},
            seeds=Seeds(seed=cfg.seed, streams="numpy/torch streams keyed by (seed, peer, purpose); "
                                                "see p2pfl.seeding"), method_defaults=cfg.method_defaults()),
            host_allocator=allocator)
        # what code beyond p2pfl's ran: each plug-in's resolved path and the sha256 of its source (none: [])
        folder.update_manifest(plugins=[p.to_dict() for p in plugins.loaded(cfg.plugins)],
                               ignored_options=list(cfg.ignored))
        if announce:
            log.info(f"p2pfl: {cfg.algorithm} on {cfg.topology}, {n_peers} peers on {world.size} rank(s); "
                     f"run folder {run_dir}")
            log.info(placement_table(hosts))
        for warning in (*cfg.ignored, biased_consensus_warning(cfg), scheme.warning(schedule)):
            if warning:
                log.warning(warning)
    ctx = RunContext(cfg=cfg, world=world, graph=graph, schedule=schedule, placement=placement,
                     transport=transport, checked=checked, gossip=Gossip(checked, robust, cfg.seed, compressor(cfg)),
                     device=device,
                     run_dir=run_dir, folder=folder, spec=run.spec, robust=robust, clock=clock, scheme=scheme)
    if clock is not None:
        ctx.record_manifest(clock={"mode": cfg.mode, **clock.describe()})
    scheme.prepare(ctx)  # its run-level state and records (relay's tree)
    return ctx


def open_run_dir(world: World, cfg: RunConfig) -> tuple[Path, RunLock | None, int | None]:
    """The run folder (a new one, or --resume's) locked by rank 0, its lock (None on other ranks) and the round
    of the checkpoint a resumed run continues from; collective. Writes nothing in the folder but its lock file."""
    resumed = cfg.resume is not None
    run_dir = Path(cfg.resume) if resumed else Path(
        world.bcast(agree(world, lambda: str(make_run_dir(cfg)) if world.is_root else None)))
    lock = agree(world, lambda: RunLock.acquire(run_dir, "--resume" if resumed else "--name")
                 if world.is_root else None)
    try:  # the checks of the checkpoint come here, before anything is written
        resume_round = (agree(world, lambda: verify_checkpoint(run_dir, world.rank, world.size)["round"])
                        if resumed else None)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return run_dir, lock, resume_round


def build_network(cfg: RunConfig, described: bool = True) -> tuple[nx.Graph, NetworkSchedule, dict | None]:
    """The support graph, the network schedule and the manifest's description of a resolved configuration (None
    unless `described`: only rank 0 writes it); a ValueError naming the option when the network cannot carry the
    run (a peer left with no neighbour)."""
    graph = support_graph(cfg, cfg.peers)
    schedule = NetworkSchedule.from_options(NetworkOptions.of(cfg), graph)
    lonely = schedule.lonely(cfg.rounds)
    if lonely:
        option = f"--crash {cfg.crash}" if cfg.crash else f"--topology {cfg.topology}"
        raise ValueError(f"{option}: peer(s) {lonely} would have no neighbour up in any round")
    SCHEMES.get(cfg.gossip).check_network(schedule, graph, cfg.rounds)
    MODES.get(cfg.mode).check_network(cfg, schedule)
    check_handover(cfg, schedule)
    if not described:
        return graph, schedule, None
    record = topologies.describe(*shown_weights(schedule, cfg.rounds), gamma=cfg.n_eff_gamma)
    # the run's network over its rounds, one definition per measure for every network (the stats above: W's own)
    record["stats"]["mixing"] = mixing_measures(schedule, cfg.rounds, cfg.n_eff_gamma, shown=record["stats"])
    record["stats"].update(schedule_measures(schedule, cfg.rounds, cfg.n_eff_gamma))  # its period's product or rate
    return graph, schedule, record


def check_handover(cfg: RunConfig, schedule: NetworkSchedule) -> None:
    """A topology that moves models between peers (teleport) needs the plain mix (a scheme's state beside the model,
    trackers, public copies, push-sum's weight, would stay behind) and a method that mixes one vector by W and says
    what vector its model is (MIXES_BY_W, HANDS_OVER); ValueError in one line otherwise."""
    if not schedule.hands_over:
        return
    if PLAIN_MIX not in SCHEMES.get(cfg.gossip).capabilities:
        raise ValueError(f"--gossip {cfg.gossip}: --topology {cfg.topology} hands the models to other peers each "
                         f"round, and this scheme's state beside the model would stay behind; use --gossip "
                         f"{' or '.join(SCHEMES.capable(PLAIN_MIX))}")
    method = algorithms.get(cfg.algorithm, cfg)
    for needed in (MIXES_BY_W, HANDS_OVER):
        if not method.can(needed):
            raise ValueError(f"--topology {cfg.topology}: hands each peer's model to another peer, but "
                             f"{cfg.algorithm} cannot: {method.why_not(needed)}")


def support_graph(cfg: RunConfig, n_peers: int) -> nx.Graph:
    """The static graph, or for a changing one the union of every link a round may use (the exchange connects
    exactly its ranks)."""
    name = topologies.base.canonical(cfg.topology)
    params = topologies.parse_params(topology_options.params(cfg))
    if name in topologies.DYNAMIC:
        return topologies.DYNAMIC[name].bind(**params).support_of(n_peers)
    if cfg.resample:
        return topologies.build("complete", n_peers)
    fixed = {"p": cfg.p} if name == "random" else {"path": cfg.graph_file} if name == "file" else {}
    return topologies.build(cfg.topology, n_peers, seed=cfg.seed, **{**fixed, **params})


#: A changing network's topology record shows its support with W averaged over at most this many rounds.
SHOWN_ROUNDS = 32


def shown_weights(schedule: NetworkSchedule, rounds: int) -> tuple[nx.Graph, np.ndarray]:
    """The graph and W the manifest's topology record describes: the static ones, or for a changing network
    its support with the mean W of its first rounds (everyone taking part, no failures)."""
    if schedule.kind == "static":  # failures and participation are draws per round, described in `network`
        return schedule.support, schedule.static_weights
    horizon = max(1, min(rounds, SHOWN_ROUNDS))
    everyone = range(schedule.n)
    total = schedule.at(1, active=everyone).W
    for t in range(2, horizon + 1):
        total = total + schedule.at(t, active=everyone).W
    return schedule.support, total / horizon


def biased_consensus_warning(cfg: RunConfig) -> str | None:
    """--weight-by-data makes W only row-stochastic except where data-weighted averaging is exact."""
    if (not cfg.weight_by_data or cfg.mixing == "server" or (cfg.topology == "complete" and cfg.mixing == "uniform")
            or "weight_by_data" in algorithms.get(cfg.algorithm, cfg).ignores):  # consensus: no shards to weigh
        return None
    return (f"--weight-by-data on {cfg.topology}/{cfg.mixing} makes W only row-stochastic: the peers drift to a "
            "biased consensus, not the data-weighted average (exact on complete/uniform or star/server)")


def build_algorithm(ctx: RunContext) -> Algorithm:
    """The configured algorithm with its peers set up (bad input ends every rank cleanly)."""
    algorithm = algorithms.get(ctx.cfg.algorithm, ctx.cfg)(ctx)
    agree(ctx.world, algorithm.setup)
    codec = None if ctx.gossip.compressor is None else ctx.gossip.compressor.inner
    if codec is not None:
        codec.bind(ctx.cfg, algorithm)
    compression = compression_record(ctx.cfg, algorithm, codec)
    if compression is not None:
        ctx.record_manifest(compression=compression)
    ctx.curious = agree(ctx.world, lambda: watch(ctx, algorithm))  # bad input ends every rank cleanly
    return algorithm


#: What the summary's whole time counts under `python -m p2pfl.run` (process_started: from /proc on Linux).
WHOLE_COMMAND = "whole command {:.1f} s, counted from the process's start (interpreter, imports, set-up, plots)"


def _run(world: World, argv: Sequence[str] | None, started: float | None = None) -> int:
    run, print_only = agree(world, lambda: resolved(world, parse_args(argv)))
    if print_only:
        if world.is_root:
            print(to_yaml(run.cfg), end="")
        return 0
    execute(world, run, started, whole=(WHOLE_COMMAND, process_started()))
    return 0


def resolved(world: World, parsed: tuple[RunConfig, bool]) -> tuple[ResolvedRun, bool]:
    """A parsed configuration (and its print-only flag) resolved for the world's size."""
    cfg, print_only = parsed
    return resolve(cfg, world.size), print_only


def execute(world: World, run: ResolvedRun, started: float | None = None,
            whole: tuple[str, float] | None = None) -> Path:
    """Set up and run a resolved run on every rank (collective), run its post-run hooks (its plots), close its
    folder, and show the summary (rank 0; `whole`: how the summary says the caller's time, a format string of its
    seconds, and when that time began, time.time()); returns the run folder. The one path of
    `python -m p2pfl.run` and p2pfl.simulate."""
    world.timeout = run.cfg.timeout  # from here on every collective waits under the run's deadline
    with precision(run.cfg.dtype):
        stop_in_setup(world)
        ctx = build_context(world, run)
        cfg = run.cfg
        watching = STOP.watching  # the command line's: a stop signal ends a stretch computing at length
        if watching and cfg.resume is None and ctx.folder is not None:  # a new run's folder holds nothing to keep
            STOP.watch(SETUP_STOP_GRACE_S, SETUP_FORCED, lambda: shutil.rmtree(ctx.run_dir, ignore_errors=True))
        try:
            hold_for_signal(world.is_root)
            stop_in_setup(world, ctx)
            algorithm = build_algorithm(ctx)
            if ctx.folder is not None:  # the defaults in sight: data, partition and its source, model, chance
                shown = banner_lines(run_setup(cfg, ctx.folder.manifest, algorithm.augmentation()), cfg)
                if shown:
                    log.info("\n".join(shown))
            runner = MODES.get(cfg.mode).runner()(ctx, algorithm)
            if cfg.resume is not None:
                agree(world, runner.restore)
            stop_in_setup(world, ctx)
            if watching:
                STOP.watch(cfg.stop_grace, ROUND_FORCED)
            if cfg.resume is not None and ctx.folder is not None:
                ctx.folder.start()
            if started is not None:
                runner.setup_s = world.allreduce_max(time.time() - started)  # the slowest rank's
            summary = runner.run()
            STOP.watch(None)  # a signal after the last round: the plots and the summary are written
        except BaseException as exc:
            if ctx.folder is not None:
                reason = failure_reason(exc)
                if reason is not None:
                    ctx.folder.fail(reason)
                ctx.folder.close()
            raise
    if ctx.folder is not None:
        try:
            if run_hooks(ctx.run_dir, cfg):  # p2pfl.runtime.hooks: analysis's plots under --plots
                ctx.folder.log_plots()  # the trackers get the plots: the folder closes after them
        finally:
            ctx.folder.close()
        if summary is not None:
            took = None if whole is None else (whole[0], time.time() - whole[1])
            log.info(summary_lines(summary, algorithm.summary_lines(summary), took))
            for warning in summary.get("warnings", ()):  # last, where it is read: a final accuracy at chance
                log.warning(warning)
    return ctx.run_dir


def stop_in_setup(world: World, ctx: RunContext | None = None) -> None:
    """A stop point of set-up (collective): once a stop signal has reached any rank, every rank leaves with
    PREEMPTED_EXIT before the first round. A new run's folder (`ctx`'s; it holds no round) is removed, so nothing
    of the run is left to read as failed or unfinished; a resumed run's is left as it was, to resume later."""
    stopped = signalled(world)
    if stopped is None:
        return
    STOP.watch(None)  # stopping here, cleanly: the forced stop's timer is not needed
    if world.is_root:
        then = "run it again"
        if ctx is not None and ctx.cfg.resume is not None:
            then = f"continue with --resume {ctx.run_dir}"
        elif ctx is not None and ctx.folder is not None:
            ctx.folder.close()
            shutil.rmtree(ctx.run_dir, ignore_errors=True)
            then = f"its run folder {ctx.run_dir} is removed; run it again"
        print(f"p2pfl: {stopped} received in set-up: stopped before the first round; {then} "
              f"(exit status {PREEMPTED_EXIT})", flush=True)
    raise SystemExit(PREEMPTED_EXIT)


def failure_reason(exc: BaseException) -> str | None:
    """summary.json's one-line reason for a run that ended on `exc`; None for an exit that is no failure (done,
    or preempted: the run resumes)."""
    if isinstance(exc, SystemExit):
        if exc.code in (None, 0, PREEMPTED_EXIT):
            return None
        if isinstance(exc, UserExit):
            return f"bad input: {exc.message}"
        if exc.code == USER_ERROR_EXIT:
            return f"bad input (exit status {USER_ERROR_EXIT}; the 'p2pfl: error:' line is on stderr)"
        return f"exit status {exc.code}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: any uncaught exception on any rank ends the whole job with that rank's traceback."""
    started = time.time()
    with stop_signals(COMMAND_LINE_SIGNALS):  # from the start: a signal in set-up stops it cleanly (stop_in_setup)
        world = World.detect()
        console.configure(world.rank)  # --quiet/--verbose set its level as the command line is read
        try:
            return _run(world, argv, started)
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure must end every rank
            abort_on_exception(world, exc)
            return 1


if __name__ == "__main__":
    sys.exit(main())
