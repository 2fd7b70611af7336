"""One typed configuration object for a run: defaults, YAML files, command-line flags and validation.

Every option is a dataclass field (p2pfl.options.opt); its metadata carries the help text and, where the set of
values is closed, where the allowed values live (the module that owns them: a registry or a names tuple). The
core options are RunConfig's fields here; each method declares its own options in its file, a section
registered in p2pfl.options, and RunConfig holds those sections' values as attributes too (cfg.mu). This
module imports no method: the sections and the methods' defaults come through p2pfl.options. The command
line is generated from the fields, so a flag, a YAML key and a field are always the same thing
(`--local-epochs` = `local_epochs:` = `local-epochs:`).

Values come, later ones winning, from the project-wide defaults here, the method's own defaults (its paper's
values, `Algorithm.defaults`) for the options the user did not set, a YAML file, and the flags. The result is
frozen; `resolve` adds what depends on the world size (the peer count, the peers spec read once) and is the
only place a run's configuration is completed.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from p2pfl.names import folder_name_error
from p2pfl.options import catalogue
from p2pfl.options import opt as _opt
from p2pfl.options import owned as _owned
from p2pfl.options import sections as _registered
from p2pfl.shown import shown
from p2pfl.yamlfile import safe_load


class ConfigError(ValueError):
    """A bad option value: the message is one line naming the option and what is allowed (a value's line breaks
    and other control characters are shown escaped, so the line stays one)."""

    def __init__(self, message: str) -> None:
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message)))


def _methods() -> list[str]:
    return list(catalogue().names())


def _topologies() -> list[str]:
    import topologies
    return [n for n in topologies.names() if n != "file"] + topologies.dynamic_names() + ["file"]


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, frozen; the resolved object is written to the run folder as config.yaml. The
    core options are its fields; the methods' options are read as attributes too (cfg.mu, from method_options)."""

    # run
    algorithm: str = _opt("dec-ssl", "the method to run", _methods)
    topology: str = _opt("cycle", "peer graph (or 'file' with --graph-file)", _topologies)
    peers: int | None = _opt(None, "number of peers K (default: the MPI world size; 20 without mpirun)")
    rounds: int = _opt(10, "communication rounds")
    seed: int = _opt(0, "the seed every random stream is keyed by")
    mixing: str = _opt("metropolis", "gossip weights", _owned("topologies.mixing", "KINDS"))
    p: float = _opt(0.7, "edge probability of the random topology")
    graph_file: str | None = _opt(None, "edge list, adjacency matrix or GraphML for --topology file")
    participation: float = _opt(1.0, "fraction rho of peers drawn to take part each round, in (0, 1]")
    out: str = _opt("runs", "parent folder of the run folder")
    name: str | None = _opt(None, "run folder name (default <time>-<algorithm>-<topology>)")
    timeout: float = _opt(300.0, "seconds a receive or collective may wait before the job aborts")
    threads: int = _opt(1, "torch intra-op threads per process (results are bitwise reproducible at equal threads)")
    device: str = _opt("auto", "auto (GPU by node-local rank when present), cpu, or cuda",
                       _owned("p2pfl.runtime.device", "DEVICES"))
    cuda_aware_mpi: bool = _opt(False, "hand GPU buffers to MPI directly instead of staging through pinned memory")
    chunk_mb: int = _opt(1024, "largest MPI message in MiB; bigger buffers travel in chunks")
    eval_every: int = _opt(5, "evaluate every N rounds (0: only at the end)")
    progress: bool = _opt(True, "show a progress bar on rank 0")
    plots: bool = _opt(True, "draw plots into the run folder at the end")
    log: str | None = _opt(None, "mirror the records, the configuration and the plots into trackers, comma-separated: "
                                 "tensorboard (<run>/tensorboard), wandb (<run>/wandb, offline unless WANDB_MODE is "
                                 "set); docs/logging.md")
    peer_records: int = _opt(1000, "records of more peers than N keep each per-peer field as statistics over the "
                                   "peers (mean, std, min, max, count) instead of one value a peer (0: never)")
    checkpoint_every: int = _opt(0, "save every peer's state every N rounds into <run>/checkpoint (0: never)")
    resume: str | None = _opt(None, "continue the run in this run folder from its last checkpoint")
    fault: str | None = _opt(None, "testing aid: 'raise@RANK:ROUND', 'silent@PEER:ROUND', 'nan@PEER:ROUND' (the "
                                   "peer's messages are NaN from that round on) or 'diverge@PEER:ROUND' (the peer's "
                                   "local update of that round turns non-finite)")
    dtype: str = _opt("float32", "floating precision of training, gossip and evaluation: float32, or float64 (rounding "
                                 "stays near float64's, so runs on different CPUs agree to a tight tolerance)",
                      ("float32", "float64"))
    gossip: str = _opt("average", "how a round combines with the network (SPEC §7): average (D-PSGD), "
                                  "gradient-tracking, d2, exact-diffusion, qgm (quasi-global momentum, μ = "
                                  "--momentum), push-sum, relay (RelaySGD on the tree topology or "
                                  "the BFS spanning tree of the graph from peer 0) or choco (CHOCO-SGD with "
                                  "--compress and --consensus-step, SPEC §8)",
                      _owned("p2pfl.gossip.schemes", "SCHEMES"))
    # compression: what a gossip message holds (SPEC §8, p2pfl.gossip.compress)
    compress: str = _opt("none", "the codec of gossip messages: none (the dense vector), top-k, random-k, qsgd or "
                                 "sign (scaled: ‖v‖₁/d · sign(v))", _owned("p2pfl.gossip.compress", "NAMES"),
                         section="compression")
    compress_ratio: float = _opt(0.1, "share ρ of coordinates top-k and random-k send: k = ⌈ρ·d⌉, ρ in (0, 1]",
                                 section="compression")
    consensus_step: float = _opt(1.0, "CHOCO's consensus step γ in (0, 1] (--gossip choco)", section="compression")
    qsgd_levels: int = _opt(4, "levels s of qsgd's stochastic rounding, >= 1 (⌈log2(s + 1)⌉ + 1 bits a coordinate)",
                            section="compression")
    # time: the simulated clock (SPEC §9, p2pfl.network.timing) and asynchronous gossip
    mode: str = _opt("sync", "sync (rounds) or async (AD-PSGD: each peer computes, then averages with one "
                             "neighbour, in simulated-time order; needs the clock)", ("sync", "async"), section="time")
    compute_time: float = _opt(0.0, "simulated seconds of one local step (0: no simulated clock unless another time "
                                    "option is set)", section="time")
    compute_spread: float = _opt(0.0, "log-normal spread σ of the peers' step times around --compute-time (median), "
                                      "drawn from (seed, peer, 'compute-time')", section="time")
    compute_trace: str | None = _opt(None, "file of per-peer seconds per local step (one per peer, CSV or text), "
                                           "instead of --compute-time", section="time")
    straggler_slowdown: float = _opt(1.0, "the --stragglers peers' step time is this many times longer (>= 1)",
                                     section="time")
    latency: float = _opt(0.0, "simulated seconds of every link's latency", section="time")
    latency_matrix: str | None = _opt(None, "K x K file of per-link latencies in seconds (.npy, CSV or text), "
                                            "instead of --latency", section="time")
    upload_rate: float = _opt(0.0, "every peer's upload capacity in bytes/s, shared by its concurrent transfers "
                              "(0: unlimited)", section="time")
    download_rate: float = _opt(0.0, "every peer's download capacity in bytes/s, shared likewise (0: unlimited)",
                                section="time")
    sim_time: float = _opt(0.0, "--mode async: end at this simulated time in seconds (0: --updates ends it)",
                           section="time")
    updates: int = _opt(0, "--mode async: end after this many local updates over all peers (0: --sim-time ends "
                           "it; with neither, --rounds x peers)", section="time")
    eval_every_s: float = _opt(0.0, "--mode async: evaluate every this many simulated seconds (0: only at the end)",
                               section="time")
    on_nonfinite: str = _opt("rollback", "a non-finite message is rejected (a failed link) and a peer whose update "
                                         "turns non-finite is rolled back to its state before the round (rollback), "
                                         "or either ends the job naming the peer (abort)", ("rollback", "abort"))
    # network: what changes and fails from round to round (p2pfl.network)
    resample: bool = _opt(False, "draw the random graph G(K, p) anew every round (--topology random)",
                          section="network")
    link_failure: float = _opt(0.0, "probability Q in [0, 1) that a link fails in a round, each independently",
                               section="network")
    crash: str | None = _opt(None, "peers that stop for good: PEER@ROUND or FRACTION@ROUND (0.15@3, 15%%@3), "
                                   "comma-separated", section="network")
    churn: float = _opt(0.0, "probability in [0, 1) that a peer is offline in a round, each independently",
                        section="network")
    stragglers: float = _opt(0.0, "fraction of peers (a seeded subset) that do only part of their local steps",
                             section="network")
    straggler_work: float = _opt(0.5, "the share of its local steps a straggler does, in (0, 1]", section="network")
    rejoin: str = _opt("mix", "a peer back after sitting out first takes its fresh neighbours' mix (mix) or trains "
                              "from its own stale model (stale)", ("mix", "stale"), section="network")
    # byzantine: attackers and robust aggregation (p2pfl.byzantine)
    byzantine: str | None = _opt(None, "attacking peers: a count drawn with the seed (2) or a list (3,7)",
                                 section="byzantine")
    attack: str = _opt("sign-flip", "what attackers send", _owned("p2pfl.byzantine", "ATTACKS"), section="byzantine")
    attack_scale: float = _opt(1.0, "strength of sign-flip (-s·x), gaussian (x + s·N(0, I)) and dissensus (its ε)",
                               section="byzantine")
    aggregator: str = _opt("mean", "how honest peers combine what they receive",
                           _owned("p2pfl.byzantine", "AGGREGATORS"), section="byzantine")
    trim: int = _opt(1, "values trimmed per side (trimmed-mean); attackers assumed per neighbourhood (clipped-gossip); "
                        "lowered where a neighbourhood is too small", section="byzantine")
    clip_radius: float | None = _opt(None, "fixed clipping radius of clipped-gossip (default: the paper's adaptive "
                                           "choice)", section="byzantine")
    # data
    dataset: str = _opt("fashion-mnist", "training data", _owned("p2pfl.data.datasets", "DATASETS"), section="data")
    data_dir: str | None = _opt(None, "data root (default $P2PFL_DATA, else ~/.cache/p2pfl)", section="data")
    download: bool = _opt(False, "allow downloading a missing dataset (one rank per node)", section="data")
    partition: str = _opt("dirichlet", "how data is split over peers", _owned("p2pfl.data.partition", "PARTITIONS"),
                          section="data")
    alpha: float = _opt(0.1, "Dirichlet concentration", section="data")
    beta: float = _opt(0.5, "iid fraction of the skew partition", section="data")
    size_band: float | None = _opt(None, "Dirichlet: redraw until every shard holds between (1 - BAND) N/K and (1 + "
                                   "BAND) N/K samples (the Dec-SSL code's rule: 0.5); default: MOON's min_size "
                                   "rule", section="data")
    min_size: int = _opt(10, "smallest shard a Dirichlet partition may give a peer", section="data")
    rotate_groups: int = _opt(1, "G peer groups whose images are rotated by g*360/G degrees", section="data")
    train_subset: int | None = _opt(None, "use only the first N training images (fast runs)", section="data")
    # training
    model: str = _opt("simple-cnn", "encoder: simple-cnn, resnet-small, resnet18, vit-tiny, hf:PATH",
                      section="training")
    local_epochs: float = _opt(1.0, "local epochs E per round", section="training")
    local_steps: int | None = _opt(None, "local steps per round (overrides --local-epochs)", section="training")
    batch_size: int = _opt(128, "local batch size", section="training")
    optimizer: str = _opt("adam", "local optimiser", _owned("p2pfl.optim", "OPTIMIZERS"), section="training")
    lr: float = _opt(1e-3, "learning rate", section="training")
    momentum: float = _opt(0.9, "SGD momentum", section="training")
    weight_decay: float = _opt(0.0, "weight decay", section="training")
    schedule: str = _opt("constant", "learning-rate schedule over rounds", _owned("p2pfl.optim", "SCHEDULES"),
                         section="training")
    keep_optimizer: bool = _opt(False, "keep optimiser state across rounds (default: reset each round)",
                                section="training")
    batch_peers: str = _opt("auto", "train a rank's peers of one architecture as one computation: auto (when the "
                            "method and model support it and the rank hosts several), on, off",
                            ("auto", "on", "off"), section="training")
    fedbn: str = _opt("off", "BatchNorm kept local (never mixed): off, type (every BatchNorm layer: FedBN) or decssl "
                      "(the Dec-SSL code's name rule: running statistics, and affine parameters inside residual "
                      "blocks)", ("off", "type", "decssl"), section="training")
    sl_augment: str = _opt("crop-flip", "augmentation of supervised training (dec-sl, local): crop-flip, or simclr "
                           "(the views Dec-SSL trains on, as the Dec-SSL code does)", ("crop-flip", "simclr"),
                           section="training")
    crop_scale: float | None = _opt(None, "smallest area fraction of the SimCLR crop (default: 0.08, SimCLR's, for "
                                    "images of 32 px or more; 0.5 below that)", section="training")
    weight_by_data: bool = _opt(False, "scale mixing weights by shard sizes", section="training")
    probe_epochs: int = _opt(30, "epochs of the linear probe", section="evaluation")
    knn_k: int = _opt(200, "neighbours of the kNN monitor", section="evaluation")
    eval_peers: int | None = _opt(None, "score a seeded sample of N peers at the final evaluation, plus the network "
                                  "average (default: every peer)", section="evaluation")
    zeta2_batch: int = _opt(512, "heterogeneity zeta2_avg at every evaluation on the first N samples of each peer's "
                            "shard (0: off)", section="evaluation")
    n_eff_gamma: float = _opt(0.951, "decay gamma of the manifest's effective number of neighbours n_eff, in [0, 1)",
                              section="evaluation", paper="Vogels et al. 2022, fitted on CIFAR-10")
    #: Not options: the values of the methods' own options, one frozen section each (p2pfl.options), read as
    #: attributes of the configuration (cfg.mu).
    method_options: tuple[Any, ...] = field(default_factory=lambda: tuple(cls() for cls in _sections().values()))
    #: Not an option: the options that took the method's default because the user did not set them.
    from_method: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:
        """A method's option (cfg.muscle_m): the value its section holds (called only for what is not a field)."""
        if not name.startswith("_"):
            for section in self.__dict__.get("method_options", ()):
                if name in section.__dataclass_fields__:
                    return getattr(section, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def clock(self) -> bool:
        """Whether the run keeps a simulated clock (SPEC §9): async does; a synchronous run once a time option
        is set."""
        return (self.mode == "async" or self.compute_time > 0 or self.compute_trace is not None or self.latency > 0
                or self.latency_matrix is not None or self.upload_rate > 0
                or self.download_rate > 0)

    def to_dict(self) -> dict[str, Any]:
        """The options (not `from_method`), as config.yaml and the manifest record them."""
        return {f.name: getattr(self, f.name) for f in options()}

    def method_defaults(self) -> dict[str, Any]:
        """The options that took the method's default, with their values (recorded in the manifest)."""
        return {name: getattr(self, name) for name in self.from_method}


#: The options a --resume may set to other values than the run's own: they continue the run (how far, how long a
#: receive waits, how often it checkpoints, the testing aid --fault), observe it (evaluation schedule, records,
#: trackers, progress, plots) or say where and how it computes without changing a number (run folder, data root,
#: message chunks, how a rank's peers are batched). Any other difference is refused (`check_resume`).
CONTINUING = frozenset({
    "rounds", "updates", "sim_time", "timeout", "checkpoint_every", "fault", "eval_every", "eval_every_s",
    "peer_records", "log", "progress", "plots", "resume", "out", "name", "data_dir", "download", "chunk_mb",
    "cuda_aware_mpi", "batch_peers"})

#: The order of the options (--help groups, config.yaml, --print-config): the core's groups and, by name, the
#: methods' sections (p2pfl.options) where they have always stood; a section not named here comes after these,
#: in the order of the names.
LAYOUT = ("run", "network", "byzantine", "consensus", "data", "training", "dec-ssl", "evaluation", "dec-byol",
          "dec-mae", "dec-featarc", "moon", "fedmuscle")


def _sections() -> dict[str, type]:
    """The methods' sections of options, in LAYOUT's order."""
    registered = _registered()
    order = [n for n in LAYOUT if n in registered] + sorted(n for n in registered if n not in LAYOUT)
    return {name: registered[name] for name in order}


def options() -> list[dataclasses.Field]:
    """The options (a flag and a YAML key each): RunConfig's core fields and the methods' sections, in LAYOUT."""
    core: dict[str, list[dataclasses.Field]] = {}
    for f in fields(RunConfig):
        if "help" in f.metadata:
            core.setdefault(f.metadata["section"], []).append(f)
    methods = _sections()
    out = []
    for key in dict.fromkeys([*LAYOUT, *core, *methods]):
        out += core.get(key, []) + (list(fields(methods[key])) if key in methods else [])
    return out


def _assemble(values: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """`base` (default: every option at its default) with `values` (option -> value, `from_method` too): the
    core's go to RunConfig's fields, a method's to the section that declares it."""
    base = RunConfig() if base is None else base
    own = {f.name for f in fields(RunConfig)}
    method_options = tuple(dataclasses.replace(s, **{k: values[k] for k in s.__dataclass_fields__ if k in values})
                           for s in base.method_options)
    return dataclasses.replace(base, **{k: v for k, v in values.items() if k in own}, method_options=method_options)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _field_type(f: dataclasses.Field) -> type:
    t = f.type if isinstance(f.type, str) else f.type.__name__
    for name, typ in (("bool", bool), ("int", int), ("float", float)):
        if t.startswith(name):
            return typ
    return str


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m p2pfl.run`, generated from RunConfig."""
    parser = argparse.ArgumentParser(
        prog="python -m p2pfl.run",
        description="Run peers that learn together over a graph (under mpirun, or all in one process). A method "
                    "may declare its paper's values for the options you leave unset; --print-config shows them.",
        argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", help="YAML file of options (flags given here override it)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in options():
        section = f.metadata["section"]
        group = groups.setdefault(section, parser.add_argument_group(section))
        typ = _field_type(f)
        help_text = f"{f.metadata['help']} (default: {f.default})"
        if typ is bool:
            group.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            group.add_argument(_flag(f.name), dest=f.name, type=str, metavar=f.name.upper(), help=help_text)
    return parser


def _convert(f: dataclasses.Field, value: Any) -> Any:
    """Convert a flag or YAML value to the field's type; ConfigError names the option."""
    typ = _field_type(f)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and f.default is None):
        if f.default is None:
            return None
        raise ConfigError(f"{_flag(f.name)}: a value is required")
    if typ in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{_flag(f.name)}: expected {typ.__name__}, got the boolean {value}")
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
        if typ is float:
            number = float(value)
            if not math.isfinite(number):
                raise ConfigError(f"{_flag(f.name)}: must be a finite number, got {shown(value)}")
            return number
        if isinstance(value, (list, dict, set, tuple, bytes)):
            raise ValueError
        return str(value)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{_flag(f.name)}: expected {typ.__name__}, got {shown(value)}") from None


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML options file; unknown keys are a ConfigError."""
    if not os.path.isfile(path):
        raise ConfigError(f"--config: file not found: {path}")
    try:
        with open(path) as fh:
            data = safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path} is not valid YAML ({str(exc).splitlines()[0]})") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"--config: {path} is not a readable UTF-8 text file ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of option: value")
    known = {f.name for f in options()}
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise ConfigError(f"--config: unknown key {shown(key)} in {path} (see python -m p2pfl.run --help)")
        out[name] = value
    return out


def parse_args(argv: Sequence[str] | None = None) -> tuple[RunConfig, bool]:
    """Parse flags (over an optional YAML file) into a validated RunConfig; returns (config, print_only)."""
    parser = build_parser()

    def fail(message: str) -> None:
        """argparse's messages, reworded to start with the option they are about."""
        named = re.match(r"argument (--[\w-]+)(?:/[\w-]+)?: (.*)", message)
        if named:
            raise ConfigError(f"{named.group(1)}: {named.group(2)}")
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown and unknown.group(1).startswith("--"):
            raise ConfigError(f"{unknown.group(1).split('=')[0]}: unknown option (see python -m p2pfl.run --help)")
        raise ConfigError(message)

    parser.error = fail  # type: ignore[method-assign]
    return from_options(vars(parser.parse_args(argv)))


def from_options(given: dict[str, Any]) -> tuple[RunConfig, bool]:
    """The validated RunConfig of options as the command line names them without dashes (`config`: a YAML file
    the others override; `print_config`), and whether only to print it: what parse_args and p2pfl.simulate share."""
    values = dict(given)
    options_file = values.pop("config", None)
    print_only = bool(values.pop("print_config", False))
    return make_config(**{**(load_yaml(options_file) if options_file is not None else {}), **values}), print_only


def make_config(**values: Any) -> RunConfig:
    """Build and validate a RunConfig from the options the user set (strings from the CLI are converted);
    the method's own defaults fill the options not among them, the project-wide ones the rest."""
    by_name = {f.name: f for f in options()}
    given = {}
    for name, value in values.items():
        name = name.replace("-", "_")
        if name not in by_name:
            raise ConfigError(f"{_flag(name)}: unknown option (see python -m p2pfl.run --help)")
        if name == "fedbn" and str(value).lower() in ("true", "false"):  # the older boolean form
            value = "type" if str(value).lower() == "true" else "off"
        given[name] = _convert(by_name[name], value)
    cfg = _assemble(given)
    _check_choice(by_name["algorithm"], cfg.algorithm)
    from_method = {k: v for k, v in _declared(cfg, "defaults").items() if k not in given}
    cfg = _assemble({**from_method, "from_method": tuple(from_method)}, cfg)
    validate(cfg)
    return cfg


def _declared(cfg: RunConfig, what: str) -> dict[str, Any]:
    """The class attribute `what` ("defaults" or "allowed"; see p2pfl.rounds.Algorithm) of the class that
    runs cfg's algorithm (found through the catalogue, p2pfl.options)."""
    return dict(getattr(catalogue().get(cfg.algorithm, cfg), what, {}))


def _check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{_flag(option)}: {message}")


def _validate_time(cfg: RunConfig) -> None:
    """The simulated clock's options, and what --mode async runs on (a static network of peers always up,
    mixing by the plain pairwise mean)."""
    for name in ("compute_time", "compute_spread", "latency", "upload_rate", "download_rate", "sim_time",
                 "eval_every_s"):
        value = getattr(cfg, name)
        _check(value >= 0 and value == value, name, f"must be >= 0, got {value}")
    _check(cfg.straggler_slowdown >= 1.0, "straggler_slowdown", f"must be >= 1, got {cfg.straggler_slowdown}")
    _check(cfg.updates >= 0, "updates", f"must be >= 0, got {cfg.updates}")
    _check(not cfg.compute_spread or (cfg.compute_time > 0 and cfg.compute_trace is None), "compute_spread",
           "spreads --compute-time (> 0) around its median; not without it, nor with --compute-trace")
    for name in ("compute_trace", "latency_matrix"):
        path = getattr(cfg, name)
        _check(path is None or os.path.isfile(path), name, f"file not found: {path}")
    if cfg.mode != "async":
        for name in ("sim_time", "updates", "eval_every_s"):
            _check(not getattr(cfg, name), name, "belongs to --mode async (synchronous runs count --rounds and "
                                                 "--eval-every)")
        return
    method = catalogue().get(cfg.algorithm, cfg)
    _check(getattr(method, "asynchronous", False), "mode",
           f"{cfg.algorithm} has no asynchronous form (async runs the weight-mixing learners and consensus)")
    _check(cfg.compute_time > 0 or cfg.compute_trace is not None, "mode",
           "async orders its events by simulated time: give --compute-time or --compute-trace")
    _check(cfg.gossip == "average" and cfg.compress == "none", "mode",
           "async averages pairwise with dense models: --gossip average, --compress none")
    _check(cfg.byzantine is None and cfg.aggregator == "mean" and cfg.mixing != "server" and not cfg.weight_by_data,
           "mode", "async averages pairwise by the plain mean: not with --byzantine, a robust --aggregator, "
                   "--mixing server or --weight-by-data")
    _check(cfg.link_failure == 0 and cfg.churn == 0 and cfg.crash is None and cfg.participation == 1.0
           and not cfg.resample, "mode", "async runs on a static network of peers always up: not with "
                                         "--link-failure, --churn, --crash, --participation or --resample")
    _check(cfg.schedule == "constant", "schedule",
           "--mode async counts no common rounds for a learning-rate schedule: use --schedule constant")
    _check(cfg.fedbn == "off", "fedbn", "--mode async averages and updates the whole model: use --fedbn off")
    _check(cfg.fault is None or cfg.fault.startswith("raise@"), "fault",
           "--mode async injects only raise@RANK:ROUND (a round: a batch of its events)")


def _check_choice(f: dataclasses.Field, value: Any) -> None:
    """The value is one its owner allows (fields without a closed set of values, and None, pass)."""
    choices = f.metadata["choices"]
    if choices is None or value is None:
        return
    allowed = list(choices() if callable(choices) else choices)
    _check(value in allowed, f.name, f"unknown value {shown(value)}; allowed: {', '.join(allowed)}")


def validate(cfg: RunConfig) -> None:
    """Check every value against what is allowed, the method's own restrictions and its sections' rules
    included."""
    for f in options():
        _check_choice(f, getattr(cfg, f.name))
    schemes = getattr(catalogue().get(cfg.algorithm, cfg), "gossip_schemes", ("average",))
    _check(cfg.gossip in schemes, "gossip", f"{cfg.algorithm} mixes by {', '.join(schemes)} only so far, got "
           f"'{cfg.gossip}' (the other schemes run with --algorithm quadratic)")
    _check(cfg.gossip == "average" or (cfg.byzantine is None and cfg.aggregator == "mean" and cfg.mixing != "server"),
           "gossip", f"{cfg.gossip} mixes by the plain W-weighted mean: it does not combine with --byzantine, a robust "
           "--aggregator or --mixing server")
    _check(cfg.gossip not in ("relay", "push-sum") or not cfg.weight_by_data, "weight_by_data",
           f"--gossip {cfg.gossip} " + ("averages uniformly over its tree" if cfg.gossip == "relay" else
                                         "splits each sender's mass evenly over its out-links")
           + "; run it without --weight-by-data")
    _check(cfg.gossip != "qgm" or cfg.optimizer == "sgd", "optimizer",
           f"--gossip qgm is quasi-global momentum over plain SGD steps; use --optimizer sgd, not {cfg.optimizer}")
    _check(cfg.gossip != "qgm" or 0 <= cfg.momentum < 1, "momentum",
           f"qgm's μ must lie in [0, 1), got {cfg.momentum}")
    _check(0.0 < cfg.compress_ratio <= 1.0, "compress_ratio", f"must lie in (0, 1], got {cfg.compress_ratio}")
    _check(cfg.qsgd_levels >= 1, "qsgd_levels", f"must be >= 1, got {cfg.qsgd_levels}")
    _check(0.0 < cfg.consensus_step <= 1.0, "consensus_step", f"must lie in (0, 1], got {cfg.consensus_step}")
    if cfg.compress != "none":
        compressible = getattr(catalogue().get(cfg.algorithm, cfg), "compressible", False)
        _check(compressible, "compress", f"{cfg.algorithm} does not mix by the W-weighted gossip --compress encodes")
        _check(cfg.gossip in ("average", "choco"), "compress",
               f"compresses --gossip average (no error feedback) and choco, got '{cfg.gossip}'")
        _check(cfg.byzantine is None and cfg.aggregator == "mean" and cfg.mixing != "server", "compress",
               "compresses the plain W-weighted mean: not with --byzantine, a robust --aggregator or --mixing server")
    _validate_time(cfg)
    for name, allowed in _declared(cfg, "allowed").items():
        value = getattr(cfg, name)
        _check(value in allowed, name,
               f"{cfg.algorithm} allows only {', '.join(map(str, allowed))}, got {shown(value)}")
    if cfg.peers is not None:
        _check(cfg.peers >= 2, "peers", f"need at least 2 peers, got {cfg.peers}")
        check_peer_count(cfg.peers)
    _check(cfg.rounds >= 0, "rounds", f"must be >= 0, got {cfg.rounds}")
    from p2pfl.seeding import MAX_SEED  # here: importing the configuration imports no torch
    _check(0 <= cfg.seed <= MAX_SEED, "seed",
           f"must lie in [0, {MAX_SEED}] (every random stream is keyed by 32 bits), got {shown(cfg.seed)}")
    _check(0.0 < cfg.p <= 1.0, "p", f"must lie in (0, 1], got {cfg.p}")
    _check(0.0 < cfg.participation <= 1.0, "participation", f"must lie in (0, 1], got {cfg.participation}")
    _check(0.0 <= cfg.link_failure < 1.0, "link_failure", f"must lie in [0, 1), got {cfg.link_failure}")
    _check(0.0 <= cfg.churn < 1.0, "churn", f"must lie in [0, 1), got {cfg.churn}")
    _check(0.0 <= cfg.stragglers <= 1.0, "stragglers", f"must lie in [0, 1], got {cfg.stragglers}")
    _check(0.0 < cfg.straggler_work <= 1.0, "straggler_work", f"must lie in (0, 1], got {cfg.straggler_work}")
    if cfg.crash is not None:
        from p2pfl.network import crash_syntax_error
        error = crash_syntax_error(cfg.crash)
        _check(error is None, "crash", str(error))
    _check(cfg.mixing != "server" or cfg.topology == "star", "mixing",
           f"server is the star's hub serving its leaves; use it with --topology star, not {cfg.topology}")
    _check(not cfg.resample or cfg.topology == "random", "resample",
           f"redraws the random graph G(K, p); use it with --topology random, not {cfg.topology}")
    _check(cfg.trim >= 0, "trim", f"must be >= 0, got {cfg.trim}")
    _check(cfg.clip_radius is None or cfg.clip_radius > 0, "clip_radius", f"must be > 0, got {cfg.clip_radius}")
    _check(cfg.attack_scale >= 0, "attack_scale", f"must be >= 0, got {cfg.attack_scale}")
    _check(cfg.timeout > 0, "timeout", f"must be > 0 seconds, got {cfg.timeout}")
    _check(1 <= cfg.threads <= MAX_THREADS, "threads",
           f"must lie in [1, {MAX_THREADS}] (threads per process; a node has fewer cores), got {shown(cfg.threads)}")
    _check(cfg.chunk_mb >= 1, "chunk_mb", f"must be >= 1, got {cfg.chunk_mb}")
    _check(cfg.peer_records >= 0, "peer_records", f"must be >= 0 (0: never summarise), got {cfg.peer_records}")
    _check(cfg.checkpoint_every >= 0, "checkpoint_every", f"must be >= 0, got {cfg.checkpoint_every}")
    trackers = _owned("p2pfl.runtime.loggers", "LOGGERS")()
    for name in log_names(cfg.log):
        _check(name in trackers, "log", f"unknown tracker '{name}'; allowed: {', '.join(trackers)} (comma-separated), "
                                        "or none")
    if cfg.resume is not None:
        _check(os.path.isfile(os.path.join(cfg.resume, "checkpoint", "state.json")), "resume",
               f"no checkpoint in {cfg.resume} (run with --checkpoint-every N first)")
    if cfg.name is not None:
        error = folder_name_error(cfg.name)
        _check(error is None, "name", str(error))
    _check(cfg.eval_every >= 0, "eval_every", f"must be >= 0, got {cfg.eval_every}")
    _check(cfg.eval_peers is None or cfg.eval_peers >= 1, "eval_peers", f"must be >= 1, got {cfg.eval_peers}")
    _check(cfg.zeta2_batch >= 0, "zeta2_batch", f"must be >= 0, got {cfg.zeta2_batch}")
    _check(0.0 <= cfg.n_eff_gamma < 1.0, "n_eff_gamma", f"must be in [0, 1), got {cfg.n_eff_gamma}")
    _validate_methods(cfg, "run")
    _check(cfg.topology != "file" or cfg.graph_file is not None, "graph_file", "required with --topology file")
    if cfg.graph_file is not None:
        _check(os.path.isfile(cfg.graph_file), "graph_file", f"file not found: {cfg.graph_file}")
    _check(0.0 < cfg.alpha, "alpha", f"must be > 0, got {cfg.alpha}")
    _check(0.0 <= cfg.beta <= 1.0, "beta", f"must lie in [0, 1], got {cfg.beta}")
    _check(cfg.min_size >= 0, "min_size", f"must be >= 0, got {cfg.min_size}")
    _check(cfg.size_band is None or 0 < cfg.size_band < 1, "size_band", f"must lie in (0, 1), got {cfg.size_band}")
    _check(cfg.crop_scale is None or 0 < cfg.crop_scale <= 1, "crop_scale",
           f"must lie in (0, 1], got {cfg.crop_scale}")
    _validate_methods(cfg, "data")
    _check(cfg.rotate_groups >= 1, "rotate_groups", f"must be >= 1, got {cfg.rotate_groups}")
    _check(cfg.train_subset is None or cfg.train_subset >= 1, "train_subset",
           f"must be >= 1 training images, got {cfg.train_subset}")
    _check(cfg.local_epochs > 0, "local_epochs", f"must be > 0, got {cfg.local_epochs}")
    _check(cfg.local_steps is None or cfg.local_steps >= 1, "local_steps", f"must be >= 1, got {cfg.local_steps}")
    _check(cfg.batch_size >= 2, "batch_size", f"must be >= 2, got {cfg.batch_size}")
    _check(cfg.lr > 0, "lr", f"must be > 0, got {cfg.lr}")
    _validate_methods(cfg, "training")
    if cfg.fault is not None:
        _check(re.fullmatch(r"(raise|silent|nan|diverge)@\d+:\d+", cfg.fault) is not None, "fault",
               "expected 'raise@RANK:ROUND', 'silent@PEER:ROUND', 'nan@PEER:ROUND' or 'diverge@PEER:ROUND', "
               f"got {shown(cfg.fault)}")


def log_names(value: str | None) -> list[str]:
    """The trackers a --log value names, in order, each once (None or 'none': no tracker)."""
    if value is None or value.strip().lower() == "none":
        return []
    return list(dict.fromkeys(part.strip() for part in value.split(",")))


def _validate_methods(cfg: RunConfig, stretch: str) -> None:
    """The rules of the methods' sections (p2pfl.options) checked after the core's `stretch` of rules ("run",
    "data" or "training"; only which of several bad values is named first depends on it), in LAYOUT."""
    for section in cfg.method_options:
        if section.validated_after == stretch and hasattr(section, "validate"):
            section.validate(_check)


#: The most torch threads a process may ask for.
MAX_THREADS = 1024
#: The most peers a run may have unless $P2PFL_MAX_PEERS says otherwise: every rank builds the graph, the network
#: schedule and the placement of all peers, about PEER_BYTES each before any model or data.
MAX_PEERS = 1_000_000
PEER_BYTES = 1024


def max_peers() -> int:
    """The largest peer count a run accepts: $P2PFL_MAX_PEERS, else MAX_PEERS."""
    raw = os.environ.get("P2PFL_MAX_PEERS")
    if raw is None:
        return MAX_PEERS
    if not raw.strip().isdigit():
        raise ConfigError(f"P2PFL_MAX_PEERS: must be a whole number of peers, got {shown(raw)}")
    return int(raw)


def check_peer_count(peers: int) -> None:
    """ConfigError naming --peers when a run of `peers` peers is over the limit, before anything is built."""
    limit = max_peers()
    _check(peers <= limit, "peers",
           f"{shown(peers)} peers exceed the limit of {limit} (every rank holds the graph and network of all peers, "
           f"about {PEER_BYTES} bytes a peer before any model: {shown(peers * PEER_BYTES >> 30)} GiB; raise the limit "
           "with P2PFL_MAX_PEERS)")


SINGLE_PROCESS_PEERS = 20
#: What reads --peers-spec: a function of the module that owns the format (named like the owners of allowed values,
#: imported only when a run has one), called with the configuration; it returns the spec, with `n_peers`.
PEERS_SPEC_READER = "p2pfl.fedmuscle.peerspec:read_run_spec"


@dataclass(frozen=True)
class ResolvedRun:
    """A run's configuration completed once for its world size, with what was read to complete it."""

    cfg: RunConfig  # peers is K, a number
    spec: Any  # the --peers-spec file as its owner read and checked it, once (None without one)


def resolve(cfg: RunConfig, world_size: int) -> ResolvedRun:
    """The run on `world_size` ranks. K is --peers, else the peers of --peers-spec, else the world size, else
    (one process) the main job's 20 peers; the peers spec is read here (PEERS_SPEC_READER) and nowhere else."""
    spec = None
    if cfg.peers_spec is not None:
        module, _, reader = PEERS_SPEC_READER.partition(":")
        spec = getattr(importlib.import_module(module), reader)(cfg)
    if cfg.peers is not None:
        peers = cfg.peers
    elif spec is not None:
        peers = spec.n_peers
    else:
        peers = world_size if world_size > 1 else SINGLE_PROCESS_PEERS
    _check(peers >= 2, "peers", f"need at least 2 peers, got {peers} (set --peers or run more ranks)")
    check_peer_count(peers)
    _check(peers >= world_size, "peers",
           f"{peers} peers cannot fill {world_size} MPI ranks; use --peers >= {world_size} or fewer ranks")
    if cfg.batch_peers == "on":
        algorithms = catalogue()
        _check(getattr(algorithms.get(cfg.algorithm, cfg), "batchable", False), "batch_peers",
               f"'on' needs a method that supports it; --algorithm {cfg.algorithm} does not yet (supported: "
               f"{', '.join(algorithms.batchable())}); use auto or off")
    if cfg.byzantine is not None:
        from p2pfl.byzantine import choose_byzantine
        attackers = len(choose_byzantine(cfg.byzantine, peers, cfg.seed))
        _check(cfg.attack != "alie" or attackers <= peers // 2, "attack",
               f"alie is defined for at most {peers // 2} attackers among {peers} peers, got {attackers}")
    if cfg.crash is not None:
        from p2pfl.network import parse_crashes
        crashes = parse_crashes(cfg.crash, peers, cfg.seed)
        _check(len(crashes) < peers or max(crashes.values()) > cfg.rounds, "crash",
               f"{cfg.crash} crashes all {peers} peers; at least one must stay up")
    if cfg.fault is not None:
        _check_fault_target(cfg.fault, peers, world_size)
    resolved = dataclasses.replace(cfg, peers=peers)
    if cfg.resume is not None:
        check_resume(resolved)
    return ResolvedRun(resolved, spec)


def _as_written(value: Any) -> str:
    """An option's value as a flag takes it (none, true/false, the rest as str)."""
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_resume(cfg: RunConfig) -> None:
    """A resolved --resume configuration against its run's own (RESUME_DIR/config.yaml): a ConfigError naming
    every option outside CONTINUING whose value differs, with both values. Options the run's file does not hold
    (added since it was written) are not compared."""
    path = os.path.join(cfg.resume, "config.yaml")
    try:
        with open(path, encoding="utf-8") as fh:
            own = safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--resume: {cfg.resume} has no config.yaml (not a run folder)") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"--resume: {path} is not readable ({type(exc).__name__})") from None
    if not isinstance(own, dict):
        raise ConfigError(f"--resume: {path} does not hold the run's options")
    differing = []
    for f in options():
        if f.name in CONTINUING or f.name not in own:
            continue
        try:
            then = _convert(f, own[f.name])
        except ConfigError:
            then = own[f.name]
        now = getattr(cfg, f.name)
        if then != now:
            differing.append(f"{_flag(f.name)} {_as_written(then)}" + (" (run)" if not differing else "") +
                             f" vs {_as_written(now)}" + (" (now)" if not differing else ""))
    if differing:
        raise ConfigError(f"--resume {cfg.resume}: differs from the run's own options: {', '.join(differing)}")


def parse_fault(spec: str) -> tuple[str, int, int]:
    """A validated --fault `KIND@WHO:ROUND` as (kind, rank or peer, round)."""
    kind, _, rest = spec.partition("@")
    who, _, when = rest.partition(":")
    return kind, int(who), int(when)


def _check_fault_target(fault: str, peers: int, world_size: int) -> None:
    """The rank (raise@) or peer (the others) a --fault names exists in a run of `peers` on `world_size` ranks."""
    kind, who, _ = parse_fault(fault)
    if kind == "raise":
        _check(who < world_size, "fault", f"rank {who} does not exist (ranks are 0..{world_size - 1})")
    else:
        _check(who < peers, "fault", f"peer {who} does not exist (peers are 0..{peers - 1})")


def to_yaml(cfg: RunConfig) -> str:
    """The configuration as YAML (snake_case keys, loadable by --config); an option that took the method's
    default says so in a comment."""
    lines = []
    for key, value in cfg.to_dict().items():
        line = yaml.safe_dump({key: value}, sort_keys=False).rstrip("\n")
        lines.append(f"{line}  # {cfg.algorithm}'s default" if key in cfg.from_method else line)
    return "\n".join(lines) + "\n"
