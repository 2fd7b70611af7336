"""One typed configuration object for a run: defaults, YAML files, command-line flags and validation.

Every option is a dataclass field (p2pfl.options.opt); its metadata carries the help text, where the set of
values is closed, where the allowed values live (the module that owns them: a registry or a names tuple), and
the range a number must lie in (`bounds`, checked for every option by `validate`). The
core options are RunConfig's fields here; each method declares its own options in its file, a section
registered in p2pfl.options, and RunConfig holds those sections' values as attributes too (cfg.mu). This
module imports no method: the sections and the methods' defaults come through p2pfl.options. The command
line is generated from the fields, so a flag, a YAML key and a field are always the same thing
(`--local-epochs` = `local_epochs:` = `local-epochs:`); `--help [TOPIC]` is rendered by p2pfl.cli_help.

Values come, later ones winning, from the project-wide defaults here, the method's own defaults (its paper's
values, `Algorithm.defaults`) for the options the user did not set, a YAML file, and the flags. The result is
frozen; `resolve` adds what depends on the world size (the peer count, the peers spec read once) and is the
only place a run's configuration is completed.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from p2pfl import plugins as _plugins
from p2pfl.capabilities import BATCHABLE, HOLDS_OUT
from p2pfl.names import folder_name_error
from p2pfl.options import bounds as _bounds
from p2pfl.options import catalogue
from p2pfl.options import opt as _opt
from p2pfl.options import owned as _owned
from p2pfl.options import reserve as _reserve
from p2pfl.options import sections as _registered
from p2pfl.privacy.dp_options import check_run as _check_dp
from p2pfl.privacy.dp_options import dp_on as _dp_on
from p2pfl.registry import load_all
from p2pfl.runtime.files import refuse_not_plain
from p2pfl.shown import shown
from p2pfl.suggest import option_hint, value_hint
from p2pfl.yamlfile import safe_load


class ConfigError(ValueError):
    """A bad option value: the message is one line naming the option and what is allowed (a value's line breaks
    and other control characters are shown escaped, so the line stays one)."""

    def __init__(self, message: str) -> None:
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message)))


def _methods() -> list[str]:
    return list(catalogue().names())


def _models() -> Sequence[str]:
    from p2pfl.models.encoders import model_choices  # when first needed: importing the configuration imports no torch
    return model_choices()  # the registered names, and any hf:PATH


def _datasets() -> Sequence[str]:
    from p2pfl.data.datasets import DATASETS  # when first needed: importing the configuration imports no torch
    return DATASETS.choices()  # the registered names, npz:PATH and folder:PATH for any path


def _topologies() -> list[str]:
    import topologies
    return topologies.choices()  # static, dynamic, then file; shown with their aliases ("cycle (ring)")


#: The most torch threads a process may ask for.
MAX_THREADS = 1024


def _seed_bounds() -> str:
    from p2pfl.seeding import MAX_SEED  # when first needed: importing the configuration imports no torch
    return f"[0, {MAX_SEED}] (every random stream is keyed by 32 bits)"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, frozen; the resolved object is written to the run folder as config.yaml. The
    core options are its fields; the methods' options are read as attributes too (cfg.mu, from method_options)."""

    # run
    algorithm: str = _opt("dec-ssl", "the method to run", _methods)
    topology: str = _opt("cycle", "peer graph (or 'file' with --graph-file)", _topologies)
    peers: int | None = _opt(None, "number of peers K (default: the MPI world size; 20 without mpirun)")
    rounds: int = _opt(10, "communication rounds", bounds=">= 0")
    seed: int = _opt(0, "the seed every random stream is keyed by", bounds=_seed_bounds)
    mixing: str = _opt("metropolis", "gossip weights", _owned("topologies.mixing", "KINDS"))
    p: float = _opt(0.7, "edge probability of the random topology", bounds="(0, 1]")
    topology_params: str | None = _opt(None, "the topology's own parameters, KEY=VALUE comma-separated "
                                             "(size=4,q=0.5): the keywords of its function")
    graph_file: str | None = _opt(None, "edge list, adjacency matrix or GraphML for --topology file")
    participation: float = _opt(1.0, "fraction rho of peers drawn to take part each round", bounds="(0, 1]")
    out: str = _opt("runs", "parent folder of the run folder")
    name: str | None = _opt(None, "run folder name (default <time>-<algorithm>-<topology>)")
    timeout: float = _opt(300.0, "seconds a receive or collective may wait before the job aborts, and a set-up "
                                 "step may compute", bounds="> 0 seconds")
    stop_grace: float = _opt(30.0, "seconds a round may run on after a stop signal (SIGTERM, SIGUSR1, Ctrl-C) to "
                                   "end with its checkpoint; then the run stops without it and --resume continues "
                                   "from the last one (Slurm's KillWait is 30 s by default)", bounds="> 0 seconds")
    threads: int = _opt(1, "torch intra-op threads per process (results are bitwise reproducible at equal threads)",
                        bounds=f"[1, {MAX_THREADS}] (threads per process; a node has fewer cores)")
    device: str = _opt("auto", "auto (GPU by node-local rank when present), cpu, or cuda",
                       _owned("p2pfl.runtime.device", "DEVICES"))
    cuda_aware_mpi: bool = _opt(False, "hand GPU buffers to MPI directly instead of staging through pinned memory")
    chunk_mb: int = _opt(1024, "largest MPI message in MiB; bigger buffers travel in chunks", bounds=">= 1")
    eval_every: int = _opt(5, "evaluate every N rounds (0: only at the end)", bounds=">= 0")
    progress: bool = _opt(True, "show a progress bar on rank 0")
    plots: bool = _opt(True, "draw plots into the run folder at the end")
    plot_format: str = _opt("png", "the plots' file formats, comma-separated: png (150 dpi), pdf, svg (vectors, for "
                                   "papers)")
    log: str | None = _opt(None, "mirror the records, the configuration and the plots into trackers, comma-separated: "
                                 "tensorboard (<run>/tensorboard), wandb (<run>/wandb, offline unless WANDB_MODE is "
                                 "set); docs/logging.md")
    log_peers: bool = _opt(False, "--log: each peer's curves too (peers/<metric>/<peer>), beside the statistics over "
                                  "the peers (records of at most --peer-records peers hold them)")
    peer_records: int = _opt(1000, "records of more peers than N keep each per-peer field as statistics over the "
                                   "peers (mean, std, min, max, count) instead of one value a peer (0: never)",
                             bounds=">= 0 (0: never summarise)")
    checkpoint_every: int = _opt(0, "save every peer's state every N rounds into <run>/checkpoint (0: never)",
                                 bounds=">= 0")
    resume: str | None = _opt(None, "continue the run in this run folder from its last checkpoint")
    plugins: tuple[str, ...] = _opt((), "import PATH.py or package.module first: a researcher's own components, "
                                        "registered as the built-ins are (repeatable; 'entry-points': the installed "
                                        "p2pfl.plugins; a resume loads the run's own; docs/extending.md)")
    fault: str | None = _opt(None, "testing aid: 'raise@RANK:ROUND', 'silent@PEER:ROUND', 'nan@PEER:ROUND' (the "
                                   "peer's messages are NaN from that round on) or 'diverge@PEER:ROUND' (the peer's "
                                   "local update of that round turns non-finite)")
    dtype: str = _opt("float32", "floating precision of training, gossip and evaluation: float32, or float64 (rounding "
                                 "stays near float64's, so runs on different CPUs agree to a tight tolerance)",
                      ("float32", "float64"))
    gossip: str = _opt("average", "the decentralised optimiser: how a round combines with the network (SPEC §7; "
                                  "each scheme and its options: --help gossip)",
                       _owned("p2pfl.gossip.schemes", "SCHEMES"))
    # compression: what a gossip message holds (SPEC §8, p2pfl.gossip.compress)
    compress: str = _opt("none", "the codec of gossip messages (each codec and its options: --help compress)",
                         _owned("p2pfl.gossip.compress", "CODECS"), section="compression")
    # time: the simulated clock (SPEC §9, p2pfl.network.timing) and asynchronous gossip
    mode: str = _opt("sync", "sync (rounds) or async (AD-PSGD: each peer computes, then averages with one "
                             "neighbour, in simulated-time order; needs the clock)", _owned("p2pfl.modes", "MODES"),
                     section="time")
    compute_time: float = _opt(0.0, "simulated seconds of one local step (0: no simulated clock unless another time "
                                    "option is set)", section="time", bounds=">= 0")
    compute_spread: float = _opt(0.0, "log-normal spread σ of the peers' step times around --compute-time (median), "
                                      "drawn from (seed, peer, 'compute-time')", section="time", bounds=">= 0")
    compute_trace: str | None = _opt(None, "file of per-peer seconds per local step (one per peer, CSV or text), "
                                           "instead of --compute-time", section="time")
    straggler_slowdown: float = _opt(1.0, "the --stragglers peers' step time is this many times longer (>= 1)",
                                     section="time", bounds=">= 1")
    sim_time: float = _opt(0.0, "--mode async: end at this simulated time in seconds (0: --updates ends it)",
                           section="time", bounds=">= 0")
    updates: int = _opt(0, "--mode async: end after this many local updates over all peers (0: --sim-time ends "
                           "it; with neither, --rounds x peers)", section="time", bounds=">= 0")
    eval_every_s: float = _opt(0.0, "--mode async: evaluate every this many simulated seconds (0: only at the end)",
                               section="time", bounds=">= 0")
    on_nonfinite: str = _opt("rollback", "a non-finite message is rejected (a failed link) and a peer whose update "
                                         "turns non-finite is rolled back to its state before the round (rollback), "
                                         "or either ends the job naming the peer (abort)", ("rollback", "abort"))
    # network: what changes and fails from round to round (p2pfl.network)
    resample: bool = _opt(False, "draw the random graph G(K, p) anew every round (--topology random)",
                          section="network")
    link_failure: float = _opt(0.0, "probability Q that a link fails in a round, each independently",
                               section="network", bounds="[0, 1)")
    crash: str | None = _opt(None, "peers that stop for good: PEER@ROUND or FRACTION@ROUND (0.15@3, 15%@3), "
                                   "comma-separated", section="network")
    churn: float = _opt(0.0, "probability that a peer is offline in a round, each independently",
                        section="network", bounds="[0, 1)")
    stragglers: float = _opt(0.0, "fraction of peers (a seeded subset) that do only part of their local steps",
                             section="network", bounds="[0, 1]")
    straggler_work: float = _opt(0.5, "the share of its local steps a straggler does", section="network",
                                 bounds="(0, 1]")
    rejoin: str = _opt("mix", "a peer back after sitting out first takes its fresh neighbours' mix (mix) or trains "
                              "from its own stale model (stale)", ("mix", "stale"), section="network")
    # byzantine: attackers and robust aggregation (p2pfl.byzantine)
    byzantine: str | None = _opt(None, "attacking peers: a count drawn with the seed (2) or a list (3,7)",
                                 section="byzantine")
    attack: str = _opt("sign-flip", "what attackers send", _owned("p2pfl.byzantine", "ATTACKS"), section="byzantine")
    attack_scale: float = _opt(1.0, "the attack's strength s (how each attack reads it: --help attack)",
                               section="byzantine")
    aggregator: str = _opt("mean", "how honest peers combine what they receive",
                           _owned("p2pfl.byzantine", "AGGREGATORS"), section="byzantine")
    trim: int = _opt(1, "values trimmed per side (trimmed-mean); attackers assumed per neighbourhood (clipped-gossip); "
                        "lowered where a neighbourhood is too small", section="byzantine")
    # data
    dataset: str = _opt("fashion-mnist", "training data (your own files: npz:PATH, folder:PATH; docs/data.md)",
                        _datasets, section="data")
    data_dir: str | None = _opt(None, "data root (default $P2PFL_DATA, else ~/.cache/p2pfl)", section="data")
    download: bool = _opt(False, "allow downloading a missing dataset (one rank per node)", section="data")
    partition: str = _opt("dirichlet", "how data is split over peers (each partition's options: --help partition); "
                                       "your own files (npz:, folder:, csv:, ...): iid unless given, docs/data.md",
                          _owned("p2pfl.data.partitions", "PARTITIONS"), section="data")
    rotate_groups: int = _opt(1, "G peer groups whose images are rotated by g*360/G degrees", section="data",
                              bounds=">= 1")
    train_subset: int | None = _opt(None, "use only the first N training images (fast runs)", section="data",
                                    bounds=">= 1 training images")
    validation: float = _opt(0.0, "hold out this share of the training images (a seeded draw) and score every "
                                  "evaluation on it instead of the test set, which is then never read (tuning; "
                                  "docs/studies.md); 0: off", section="data", bounds="[0, 0.5]")
    # training
    model: str = _opt("simple-cnn", "encoder (hf:PATH: a local Hugging Face vision model)", _models,
                      section="training")
    local_epochs: float = _opt(1.0, "local epochs E per round", section="training", bounds="> 0")
    local_steps: int | None = _opt(None, "local steps per round (overrides --local-epochs)", section="training",
                                   bounds=">= 1")
    batch_size: int = _opt(128, "local batch size", section="training", bounds=">= 2")
    optimizer: str = _opt("adam", "local optimiser", _owned("p2pfl.optim", "OPTIMIZERS"), section="training")
    lr: float = _opt(1e-3, "learning rate", section="training", bounds="> 0")
    momentum: float = _opt(0.9, "SGD momentum", section="training")
    nesterov: bool = _opt(False, "Nesterov momentum for the local SGD steps (--optimizer sgd, --momentum > 0)",
                          section="training")
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
                                    "images of 32 px or more; 0.5 below that)", section="training", bounds="(0, 1]")
    weight_by_data: bool = _opt(False, "scale mixing weights by shard sizes", section="training")
    probe_epochs: int = _opt(30, "epochs of the linear probe", section="evaluation")
    knn_k: int = _opt(200, "neighbours of the kNN monitor", section="evaluation")
    eval_peers: int | None = _opt(None, "score a seeded sample of N peers at the final evaluation, plus the network "
                                  "average (default: every peer; 0: the network average alone); identical models "
                                  "are scored once", section="evaluation", bounds=">= 0")
    peer_scores: str = _opt("final", "when each peer's own model is scored (the --eval-peers sample): at the final "
                                     "evaluation, or at every evaluation (each distinct model scored each time: the "
                                     "peers' mean, min and max in every evaluation record)", ("final", "every"),
                            section="evaluation")
    zeta2_batch: int | None = _opt(None, "heterogeneity zeta2_avg at every evaluation on the first N samples of each "
                                   "peer's shard (0: off; default: the learners at the final evaluation only, on "
                                   "512 samples, as it costs a forward and backward pass of them a peer; the "
                                   "quadratic problem's exact gradients at every evaluation)", section="evaluation",
                                   bounds=">= 0")
    n_eff_gamma: float = _opt(0.951, "decay gamma of the manifest's effective number of neighbours n_eff",
                              section="evaluation", paper="Vogels et al. 2022, fitted on CIFAR-10", bounds="[0, 1)")
    #: Not options: the values of the methods' own options, one frozen section each (p2pfl.options), read as
    #: attributes of the configuration (cfg.mu).
    method_options: tuple[Any, ...] = field(default_factory=lambda: tuple(cls() for cls in _sections().values()))
    #: Not an option: the options that took the method's default because the user did not set them.
    from_method: tuple[str, ...] = ()
    #: Not an option: the options that took a default chosen for the data (`data_defaults`: a dataset of one's own
    #: files is split IID) because neither the user nor the method set them.
    from_data: tuple[str, ...] = ()
    #: Not an option: the options the user set (flags, the --config file, p2pfl.simulate's keywords), in that order.
    given: tuple[str, ...] = ()
    #: Not an option: one line per option the user set that the run does not read (p2pfl.ignored).
    ignored: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:
        """A method's option (cfg.muscle_m): the value its section holds (called only for what is not a field)."""
        if not name.startswith("_"):
            for section in self.__dict__.get("method_options", ()):
                if name in section.__dataclass_fields__:
                    return getattr(section, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def clock(self) -> bool:
        """Whether the run keeps a simulated clock (SPEC §9): when its mode needs one (async), a step time is set,
        or its network model keeps one (`keeps_clock`: the default links model once a link option is set)."""
        from p2pfl.modes import MODES  # when first needed: importing the configuration imports no component
        from p2pfl.network.clock import NETWORK_MODELS
        return (MODES.get(self.mode).keeps_clock(self) or self.compute_time > 0 or self.compute_trace is not None
                or NETWORK_MODELS.get(self.network_model).keeps_clock(self))

    def to_dict(self) -> dict[str, Any]:
        """The options (not `from_method`), as config.yaml and the manifest record them."""
        return {f.name: getattr(self, f.name) for f in options()}

    def method_defaults(self) -> dict[str, Any]:
        """The options that took the method's default, with their values (recorded in the manifest)."""
        return {name: getattr(self, name) for name in self.from_method}

    def source(self, name: str) -> str:
        """Where option `name`'s value came from, as the banner says it: "given" (the user set it), "method
        default" (the method's own value, Algorithm.defaults), "default for own data" (`data_defaults`; on
        --resume "recorded by the run", which may have been any of these), else "core default" (RunConfig's)."""
        if name in self.given:
            return "given"
        if name in self.from_method:
            return "method default"
        if name in self.from_data:  # on --resume, `data_defaults` took the value the run recorded
            return RECORDED if self.resume is not None else DATA_DEFAULT
        return "core default"


#: The options a --resume may set to other values than the run's own: they continue the run (how far, how long a
#: receive waits, how often it checkpoints, the testing aid --fault), observe it (evaluation schedule, records,
#: trackers, progress, plots) or say where and how it computes without changing a number (run folder, data root,
#: message chunks, how a rank's peers are batched). Any other difference is refused (`check_resume`).
CONTINUING = frozenset({
    "rounds", "updates", "sim_time", "timeout", "stop_grace", "checkpoint_every", "fault", "eval_every", "eval_every_s",
    "peer_records", "peer_scores", "log", "log_peers", "progress", "plots", "plot_format", "resume", "out", "name",
    "data_dir", "download", "chunk_mb", "cuda_aware_mpi", "batch_peers"})

#: The order of the options (--help groups, config.yaml, --print-config): the core's groups and, by name, the
#: methods' sections (p2pfl.options) where they have always stood; a section not named here comes after these,
#: in the order of the names.
LAYOUT = ("run", "network", "byzantine", "consensus", "data", "training", "dec-ssl", "evaluation", "dec-byol",
          "dec-mae", "dec-featarc", "moon", "fedmuscle")


_reserve(f.name for f in fields(RunConfig))


def _sections() -> dict[str, type]:
    """The methods' and components' sections of options, in LAYOUT's order."""
    load_all()  # every kind's built-ins: their components' sections
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


#: The options whose flag is not their name with dashes: a repeatable flag is singular, its key plural.
_FLAGS = {"plugins": "--plugin"}


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


#: The types an option's value may take, by the name its annotation gives (any other: str).
_TYPES = {"bool": bool, "int": int, "float": float, "str": str, "tuple": tuple}


def _field_type(f: dataclasses.Field) -> type:
    """The type of an option's values: its annotation without None (`int | None`: int; `tuple[str, ...]`: tuple),
    read from the annotation's text too (the sections' files use `from __future__ import annotations`)."""
    annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    named = [part.strip().split("[")[0] for part in annotation.split("|")]
    return next((_TYPES.get(name, str) for name in named if name != "None"), str)


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
        if typ is tuple:
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
                raise ValueError
            return tuple(values)
        if typ is float:
            number = float(value)
            if not math.isfinite(number):
                raise ConfigError(f"{_flag(f.name)}: must be a finite number, got {shown(value)}")
            return number
        if isinstance(value, (list, dict, set, tuple, bytes)):
            raise ValueError
        return _recorded(f, str(value))
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{_flag(f.name)}: expected {typ.__name__}, got {shown(value)}") from None


def _recorded(f: dataclasses.Field, value: str) -> str:
    """A closed option's value as its owner records it, where its choices have a `canonical` (--topology ring is
    recorded as cycle: a run and its --resume agree whichever name each gave)."""
    choices = f.metadata["choices"]
    spell = getattr(choices() if callable(choices) else choices, "canonical", None)
    return spell(value) if spell is not None else value


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
    listed = [key for key in data if str(key).replace("-", "_") in _PLUGIN_KEYS]
    folder = os.path.dirname(os.path.abspath(path))  # a plug-in's path is relative to the file that names it
    plugins = _load_plugins(tuple(spec for key in listed for spec in _plugins.specs(data.pop(key), folder)))
    known = {f.name for f in options()}  # after the file's plug-ins: they may add options
    out: dict[str, Any] = {"plugins": plugins} if plugins else {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise ConfigError(f"--config: unknown key {shown(key)} in {path}{option_hint(str(key), known)} "
                              "(see python -m p2pfl.run --help)")
        out[name] = value
    return out


#: The keys that name plug-ins (the option, and its flag's singular).
_PLUGIN_KEYS = ("plugins", "plugin")


def _load_plugins(specs: Any, base: str | None = None) -> tuple[str, ...]:
    """Import the plug-ins `specs` names (resolved against `base`, default the working directory), each once per
    process; their resolved specs, as `cfg.plugins` records them."""
    resolved = _plugins.specs(specs, base)
    _plugins.load(resolved)
    return resolved


def _run_options(run_dir: str) -> dict[str, Any]:
    """The options a run folder's config.yaml records ({} when it cannot be read: `check_resume` says why)."""
    path = os.path.join(run_dir, "config.yaml")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a link or a FIFO: check_resume refuses the folder
            return {}
        with open(path, encoding="utf-8") as fh:
            own = safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return own if isinstance(own, dict) else {}


def _run_plugins(run_dir: str) -> tuple[str, ...]:
    """The plug-ins a run folder's config.yaml records (none when it cannot be read: `check_resume` says why)."""
    own = _run_options(run_dir)
    return _plugins.specs(own.get("plugins")) if own else ()


def _run_option(run_dir: str, name: str) -> str | None:
    """The text value of option `name` a run folder's config.yaml records (None when absent or unreadable)."""
    value = _run_options(run_dir).get(name)
    return value if isinstance(value, str) else None


def from_options(given: dict[str, Any]) -> tuple[RunConfig, bool]:
    """The validated RunConfig of options as the command line names them without dashes (`config`: a YAML file
    the others override; `print_config`), and whether only to print it: what parse_args and p2pfl.simulate share."""
    values = dict(given)
    options_file = values.pop("config", None)
    print_only = bool(values.pop("print_config", False))
    from_file = load_yaml(options_file) if options_file is not None else {}
    listed = (*from_file.get("plugins", ()), *(spec for key in _PLUGIN_KEYS for spec in _plugins.specs(values.pop(
        key, None))))  # the file's and the caller's, all loaded (a plug-in cannot be unloaded)
    if listed:
        values["plugins"] = listed
    return make_config(**{**from_file, **values}), print_only


def make_config(**values: Any) -> RunConfig:
    """Build and validate a RunConfig from the options the user set (strings from the CLI are converted);
    the method's own defaults fill the options not among them, the project-wide ones the rest. The plug-ins named
    (`plugins`, or `plugin`; a --resume naming none: its run's own) are imported first."""
    values = {name.replace("-", "_"): value for name, value in values.items()}
    listed = tuple(spec for key in _PLUGIN_KEYS for spec in _plugins.specs(values.pop(key, None)))
    if not listed and values.get("resume") is not None:
        listed = _run_plugins(str(values["resume"]))
    if listed:
        values["plugins"] = _load_plugins(listed)
        if values.get("resume") is not None:
            _plugins.check_unchanged(str(values["resume"]), values["plugins"])
    by_name = {f.name: f for f in options()}
    given = {}
    for name, value in values.items():
        name = name.replace("-", "_")
        if name not in by_name:
            raise ConfigError(f"{_flag(name)}: unknown option{option_hint(name, map(_flag, by_name))} "
                              "(see python -m p2pfl.run --help)")
        if name == "fedbn" and str(value).lower() in ("true", "false"):  # the older boolean form
            value = "type" if str(value).lower() == "true" else "off"
        given[name] = _convert(by_name[name], value)
    cfg = _assemble(given)
    _check_choice(by_name["algorithm"], cfg.algorithm)
    from_method = {k: v for k, v in _declared(cfg, "defaults").items() if k not in given}
    cfg = _assemble({**from_method, "from_method": tuple(from_method)}, cfg)
    from_data = {k: v for k, v in data_defaults(cfg, given).items() if k not in from_method}
    cfg = _assemble({**from_data, "from_data": tuple(from_data), "given": tuple(given)}, cfg)
    validate(cfg)
    from p2pfl.ignored import ignored_options  # imports the methods' catalogue, as validate has
    return dataclasses.replace(cfg, ignored=ignored_options(cfg, given))


#: How the banner and --print-config name the source of a value `data_defaults` chose.
DATA_DEFAULT = "default for own data"
#: ... and of the value a --resume took from the run's config.yaml where the user gave none.
RECORDED = "recorded by the run"
#: The partition a dataset of one's own files takes when none is given (`data_defaults`).
OWN_DATA_PARTITION = "iid"


def own_data(dataset: str) -> bool:
    """Whether --dataset names a researcher's own files (npz:, folder:, csv:, hf:, the LEAF formats: a dataset
    read from its PATH, p2pfl.data.datasets._own.OwnFiles), not a built-in set; False for an unknown name."""
    from p2pfl.data.datasets import DATASETS  # when first needed: importing the configuration imports no torch
    from p2pfl.data.datasets._own import OwnFiles
    try:
        return issubclass(DATASETS.get(dataset), OwnFiles)
    except Exception:  # noqa: BLE001 - an unknown or malformed name: validate names it
        return False


def data_defaults(cfg: RunConfig, given: Any) -> dict[str, Any]:
    """The defaults chosen for the run's data where the user set neither the option nor any of its own options:
    a dataset of one's own files is split IID (OWN_DATA_PARTITION) rather than by the core's Dirichlet α = 0.1.

    Why IID: the core's default reproduces the papers' label skew on their benchmarks (MOON's α = 0.1 on CIFAR-10),
    a deliberately hard split. On a user's own data, often small (scikit-learn's 1,797 digits) and of unknown
    balance, that skew leaves a peer a class or two and can keep a short run at chance, with nothing said; IID is
    the split that asks nothing of the data, and the one a first run should be compared against. The banner names
    the split and its source, and `--partition dirichlet` (or any partition option, `--alpha 0.5`, which keeps the
    core's Dirichlet) asks for skew. A --resume without --partition takes the partition its run recorded in
    config.yaml (a run started before this default resumes as it was)."""
    given = set(given)
    if "partition" in given or not own_data(cfg.dataset):
        return {}
    from p2pfl.data.partitions import PARTITIONS  # a partition's own options given: that partition's family
    if given & {name for kind in PARTITIONS for name in PARTITIONS.get(kind).parameters()}:
        return {}
    if cfg.resume is not None:
        recorded = _run_option(str(cfg.resume), "partition")
        if recorded is not None:
            return {"partition": recorded}
    return {"partition": OWN_DATA_PARTITION}


def _declared(cfg: RunConfig, what: str) -> dict[str, Any]:
    """The class attribute `what` ("defaults" or "allowed"; see p2pfl.method.Algorithm) of the class that
    runs cfg's algorithm (found through the catalogue, p2pfl.options)."""
    return dict(getattr(catalogue().get(cfg.algorithm, cfg), what, {}))


def _check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{_flag(option)}: {message}")


def _check_choice(f: dataclasses.Field, value: Any) -> None:
    """The value is one its owner allows (fields without a closed set of values, and None, pass)."""
    choices = f.metadata["choices"]
    if choices is None or value is None:
        return
    allowed = choices() if callable(choices) else choices  # its own `in` (--model accepts any hf:PATH)
    _check(value in allowed, f.name, f"unknown value {shown(value)}{value_hint(str(value), allowed) or ';'} allowed: "
                                     f"{', '.join(allowed)}")


def _check_bounds(f: dataclasses.Field, value: Any) -> None:
    """The value lies in the option's declared range (fields without one, and None, pass)."""
    declared = _bounds(f)
    if declared is not None and value is not None:
        _check(declared.admits(value), f.name, declared.message(shown(value)))


def validate(cfg: RunConfig) -> None:
    """Check every value against what is allowed (its choices, its range), the method's own restrictions and its
    sections' rules included."""
    for f in options():
        _check_choice(f, getattr(cfg, f.name))
        _check_bounds(f, getattr(cfg, f.name))
    for name, allowed in _declared(cfg, "allowed").items():
        value = getattr(cfg, name)
        _check(value in allowed, name,
               f"{cfg.algorithm} allows only {', '.join(map(str, allowed))}, got {shown(value)}")
    if cfg.peers is not None:
        _check(cfg.peers >= 2, "peers", f"need at least 2 peers, got {cfg.peers}")
        check_peer_count(cfg.peers)
    if cfg.validation > 0:
        method = catalogue().get(cfg.algorithm, cfg)
        _check(method.can(HOLDS_OUT), "validation", f"{cfg.algorithm} is not scored on the run's dataset, so it has "
                                                    "no held-out split to carve; run it without --validation")
    if _dp_on(cfg):  # DP-SGD's section registers with this import; its rules on the method and --resume
        _check_dp(cfg, _check, catalogue().get(cfg.algorithm, cfg))
    if cfg.crash is not None:
        from p2pfl.network import crash_syntax_error
        error = crash_syntax_error(cfg.crash)
        _check(error is None, "crash", str(error))
    _check(cfg.mixing != "server" or cfg.topology == "star", "mixing",
           f"server is the star's hub serving its leaves; use it with --topology star, not {cfg.topology}")
    _check(not cfg.resample or cfg.topology == "random", "resample",
           f"redraws the random graph G(K, p); use it with --topology random, not {cfg.topology}")
    _check(cfg.trim >= 0, "trim", f"must be >= 0, got {cfg.trim}")
    _check(cfg.attack_scale >= 0, "attack_scale", f"must be >= 0, got {cfg.attack_scale}")
    trackers = _owned("p2pfl.runtime.loggers", "LOGGERS")()
    for name in log_names(cfg.log):
        _check(name in trackers, "log", f"unknown tracker '{name}'; allowed: {', '.join(trackers)} (comma-separated), "
                                        "or none")
    plot_format_names(cfg.plot_format)
    _check(not cfg.log_peers or bool(log_names(cfg.log)), "log_peers",
           "mirrors each peer's curves into the trackers; name them with --log tensorboard and/or wandb")
    if cfg.resume is not None:
        _check(os.path.isfile(os.path.join(cfg.resume, "checkpoint", "state.json")), "resume",
               f"no checkpoint in {cfg.resume} (run with --checkpoint-every N first)")
    if cfg.name is not None:
        error = folder_name_error(cfg.name)
        _check(error is None, "name", str(error))
    _validate_methods(cfg, "run")
    _check(cfg.topology != "file" or cfg.graph_file is not None, "graph_file", "required with --topology file")
    import topologies
    from p2pfl.network.topology_options import params  # --topology-params with the topology's own flags
    try:
        merged = params(cfg)
        if merged is not None:
            topologies.topology_params(cfg.topology, merged)
    except topologies.TopologyError as exc:
        _check(False, "topology_params", str(exc))
    if cfg.graph_file is not None:
        _check(os.path.isfile(cfg.graph_file), "graph_file", f"file not found: {cfg.graph_file}")
    _validate_methods(cfg, "data")
    _check(not cfg.nesterov or (cfg.optimizer == "sgd" and cfg.momentum > 0), "nesterov",
           f"is SGD's Nesterov momentum: needs --optimizer sgd and --momentum > 0, got --optimizer {cfg.optimizer} "
           f"--momentum {shown(cfg.momentum)}")
    _validate_methods(cfg, "training")
    from p2pfl.registry import check_selected  # the rules of the components the run selects, in their files
    check_selected(cfg, _check)
    if cfg.fault is not None:
        _check(re.fullmatch(r"(raise|silent|nan|diverge)@\d+:\d+", cfg.fault) is not None, "fault",
               "expected 'raise@RANK:ROUND', 'silent@PEER:ROUND', 'nan@PEER:ROUND' or 'diverge@PEER:ROUND', "
               f"got {shown(cfg.fault)}")


#: The file formats the plots can be written in (--plot-format; analysis.style.plot_formats).
PLOT_FORMATS = ("png", "pdf", "svg")


def plot_format_names(value: str) -> list[str]:
    """The formats a --plot-format value names ("png,pdf"), in order, each once; ConfigError for a format not in
    PLOT_FORMATS, or none."""
    names = list(dict.fromkeys(part.strip().lower() for part in value.split(",") if part.strip()))
    bad = [name for name in names if name not in PLOT_FORMATS]
    _check(bool(names) and not bad, "plot_format", f"unknown format {shown(bad[0]) if bad else shown(value)}; "
                                                    f"allowed: {', '.join(PLOT_FORMATS)} (comma-separated)")
    return names


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
        method = algorithms.get(cfg.algorithm, cfg)
        _check(method.can(BATCHABLE), "batch_peers",
               f"'on' needs a method that supports it; --algorithm {cfg.algorithm} does not yet "
               f"({method.why_not(BATCHABLE)}; supported: {', '.join(algorithms.batchable())}); use auto or off")
    resolved = dataclasses.replace(cfg, peers=peers)
    from p2pfl.registry import check_resolved  # the selected components' rules that need the peer count
    check_resolved(resolved, _check)
    if cfg.crash is not None:
        from p2pfl.network import parse_crashes
        crashes = parse_crashes(cfg.crash, peers, cfg.seed)
        _check(len(crashes) < peers or max(crashes.values()) > cfg.rounds, "crash",
               f"{cfg.crash} crashes all {peers} peers; at least one must stay up")
    if cfg.fault is not None:
        _check_fault_target(cfg.fault, peers, world_size)
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
    if os.path.isdir(cfg.resume):  # first: nothing of the folder is opened through a link or blocks on a FIFO
        try:
            refuse_not_plain(cfg.resume, "--resume")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
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
    default says so in a comment (`# fedavg's default`), as does one a default chosen for the data set
    (`# default for own data`); given values and the core's defaults are left unmarked (config.yaml, the run
    folder's, is this text too)."""
    lines = []
    marks = {"method default": f"{cfg.algorithm}'s default", DATA_DEFAULT: DATA_DEFAULT, RECORDED: RECORDED}
    for key, value in cfg.to_dict().items():
        line = yaml.safe_dump({key: value}, sort_keys=False).rstrip("\n")
        mark = marks.get(cfg.source(key))
        lines.append(f"{line}  # {mark}" if mark else line)
    return "\n".join(lines) + "\n"
