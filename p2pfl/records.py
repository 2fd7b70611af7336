"""The run folder's records, key by key: metrics.jsonl's round and eval records, summary.json, manifest.json.

The writers build their records with the constructors here and `analysis` reads exactly these keys, so a key
is named in one place. The types describe the files as JSON reads them back: peer and rank ids used as keys
are strings. config.yaml, and manifest["config"], are `RunConfig.to_dict()` (p2pfl.config).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, NotRequired, TypedDict

from topologies.records import TopologyRecord, TopologyStats  # noqa: F401  (re-exported: defined in topologies)

# ------------------------------------------------------------------------------------------------ metrics.jsonl

#: Fields of the round records that measure time, not behaviour.
TIMING_FIELDS = frozenset({"elapsed_s", "time_compute_s", "time_comm_s", "time_wait_s", "time_local_s", "round_s",
                           "time_schedule_s"})
#: A per-peer metric `<name>` of a round record comes with its mean over peers, `<name>_mean`.
MEAN = "_mean"
#: Eval metrics: statistics over peers of a per-peer metric end in these ...
PEER_MEAN, PEER_MIN, PEER_MAX = "_peer_mean", "_peer_min", "_peer_max"
#: ... and metrics of the network-average model in this.
AVG = "_avg"
#: An eval metric's value for the untrained model (the common initialisation): `<name>_untrained` is the
#: reference `<name>_avg` and the peers' `<name>` must beat.
UNTRAINED = "_untrained"
#: Eval metrics that count or index rather than measure (how many peers were scored, which cluster model was
#: best): kept in the records and tables, never drawn as a metric. Any name ending in COUNT is one too.
PEERS_SCORED, BEST_CLUSTER = "peers_scored", "best_cluster"
BOOKKEEPING = frozenset({PEERS_SCORED, BEST_CLUSTER})
COUNT = "_count"
#: The per-peer metric of local training every Learner reports in the round records.
LOSS = "loss"
#: With DP-SGD (--dp-clip): each trained peer's ε so far, a per-peer metric of the round records (with its mean);
#: in summary.json each peer's ε over the run, `dp_epsilon_max` their largest and `dp_delta` (p2pfl.privacy).
DP_EPSILON = "dp_epsilon"
#: Summarised records (more peers than --peer-records): a per-peer field `<name>` ({peer: value}) gives way to
#: `<name>_stats`, its PeerStats over the peers; such records carry SUMMARISED: true.
STATS, SUMMARISED = "_stats", "summarised"
#: The simulated clock's keys, present only when it is on: the round records' cumulative `sim_time_s` (also at the
#: top level of eval records), the round's `sim_round_s` and per-peer {peer: seconds} `sim_compute_s` etc.
SIM_TIME, SIM_ROUND = "sim_time_s", "sim_round_s"
SIM_COMPUTE, SIM_TRANSFER, SIM_IDLE = "sim_compute_s", "sim_transfer_s", "sim_idle_s"


class SimClock(TypedDict, total=False):
    """The simulated clock (SPEC §9) when a record was written, in runs that keep one (round 0's: 0)."""

    sim_time_s: float


class RoundStart(SimClock):
    """Round 0: the consensus distance before any round (None for methods without one)."""

    type: Literal["round"]
    round: int
    elapsed_s: float
    consensus_distance: float | None


class PeerStats(TypedDict):
    """One per-peer quantity summarised over the peers that have it (summarised records): mean, population
    standard deviation, min and max of the finite values (None when there is none), how many peers had a finite
    value and how many a non-finite one."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    count: int
    nonfinite: int


class NetworkRecord(TypedDict, total=False):
    """The network a round used (p2pfl.network.RoundNetwork.record): the number of links (i hears from j counts
    once) and a digest of them, who was crashed, back from sitting out, or straggling, each active peer's
    in-degree (a summarised record: `degree_stats` instead), and ‖W_t − J‖₂ over the alive peers (up to
    p2pfl.round_records.SPECTRAL_MAX_PEERS peers)."""

    links: int
    digest: str
    crashed: list[int]
    rejoining: list[int]
    straggling: list[int]
    degree: dict[str, int]
    degree_stats: PeerStats
    sigma2: float


class RobustRound(TypedDict, total=False):
    """What only runs with --byzantine or a robust --aggregator record of a round."""

    #: [receiver, trim]: the receiver's neighbourhood made the aggregator assume fewer attackers than --trim
    #: (p2pfl.byzantine.aggregators.lowered_trim)
    trim_lowered: list[list[int]]


class SimRound(SimClock, total=False):
    """What a run with the simulated clock (SPEC §9, p2pfl.network.timing) adds to its round records: the round's
    simulated seconds, the clock at its end, and each active peer's compute, slowest transfer and idle seconds
    (round 0 carries sim_time_s 0). Asynchronous runs record their events instead of the per-peer split."""

    sim_round_s: float
    sim_compute_s: dict[str, float]
    sim_transfer_s: dict[str, float]
    sim_idle_s: dict[str, float]


class AsyncRound(SimClock, total=False):
    """What an asynchronous run's round record (one batch of disjoint pairs, p2pfl.async_gossip) adds: the
    batch's span and its events, [peer, partner, time, update, staleness] in their order."""

    sim_round_s: float
    async_events: list[list[float]]


class _RoundFields(RoundStart, RobustRound):
    """What every finished round records, summarised or not."""

    network: NetworkRecord
    bytes_sent: int
    bytes_recv: int
    time_compute_s: float
    time_comm_s: float
    time_wait_s: float
    time_local_s: float
    round_s: float
    time_schedule_s: float
    rejected: list[list[int]]  # [receiver, sender] of the non-finite messages rejected (failed links)
    rolled_back: list[int]  # peers whose update turned non-finite, set back to their state before the round
    cut: list[list[int]]  # [receiver, neighbour] the robust aggregator clipped or trimmed (most coordinates)


class RoundRecord(_RoundFields, SimRound, AsyncRound):
    """A finished round t >= 1; bytes count every neighbour message, times are the slowest rank's.

    Besides these keys, each per-peer metric the method reports (e.g. `loss`) appears as `<name>`: {peer: value}
    over the active peers and `<name>_mean`: their mean over finite values (None when there is none), and each
    network-level number of `Algorithm.round_metrics` as `<name>`: value (quadratic's `error`, round 0's too).
    """

    active: list[int]
    bytes_sent_per_peer: dict[str, int]


class SimRoundSummary(SimClock, total=False):
    """SimRound of a summarised record: the per-peer seconds as PeerStats over the active peers."""

    sim_round_s: float
    sim_compute_s_stats: PeerStats
    sim_transfer_s_stats: PeerStats
    sim_idle_s_stats: PeerStats


class SummarisedRound(_RoundFields, SimRoundSummary, AsyncRound):
    """A round record of a run with more peers than --peer-records (`summarise_round`): RoundRecord with each
    per-peer dict replaced by its PeerStats: `<name>_stats` for each per-peer metric `<name>` (next to
    `<name>_mean`, as in RoundRecord), `bytes_sent_per_peer_stats`, the network's `degree_stats`; `active` by
    the number of active peers and, when at most --peer-records peers sat the round out, their ids (else None).
    """

    summarised: Literal[True]
    active_count: int
    inactive: list[int] | None
    bytes_sent_per_peer_stats: PeerStats


class _EvalFields(SimClock):
    type: Literal["eval"]
    round: int
    final: bool
    metrics: dict[str, float]
    per_peer: dict[str, dict[str, float | str]]


class EvalRecord(_EvalFields, total=False):
    """An evaluation: network-level metrics plus statistics over peers (`_peer_mean/_min/_max`), and each
    peer's own metrics (numbers, and a few labels such as the name of a peer's task metric). An evaluation of
    more peers than --peer-records is summarised (`summarise_eval`): `per_peer` is empty, `per_peer_stats` holds
    each numeric metric's PeerStats and `per_peer_labels` each label's values with their peer counts."""

    summarised: Literal[True]
    per_peer_stats: dict[str, PeerStats]
    per_peer_labels: dict[str, dict[str, int]]


ROUND_KEYS = (RoundRecord.__required_keys__ | SimRound.__optional_keys__ | AsyncRound.__optional_keys__
              | SummarisedRound.__required_keys__ | SimRoundSummary.__optional_keys__)


def peer_keyed(value: Mapping[Any, Any]) -> bool:
    """Whether a record's map is keyed by peer ids ({"0": v, ...} as written, {0: v} before): `loss`,
    `bytes_sent_per_peer`, `network.degree`, an eval's `per_peer`."""
    return bool(value) and all(str(key).isdigit() for key in value)


def numeric_leaves(value: Any, path: tuple[str, ...] = (), peer: int | None = None
                   ) -> Iterator[tuple[tuple[str, ...], int | None, float]]:
    """(key path, peer, number) of every number under a record's `value`, non-finite ones too: a peer-keyed map
    gives its values with `peer` set (its keys are not in the path; inside it, keys are that peer's own);
    strings, booleans, None and lists give nothing. The one walk of a record that the trackers
    (p2pfl.runtime.loggers) and the tidy tables (analysis.tidy) share."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        yield path, peer, float(value)
    elif isinstance(value, Mapping):
        if peer is None and peer_keyed(value):
            for key, inner in value.items():
                yield from numeric_leaves(inner, path, int(key))
        else:
            for key, inner in value.items():
                yield from numeric_leaves(inner, (*path, str(key)), peer)


def metric_names(record: RoundStart | RoundRecord) -> list[str]:
    """The per-peer metrics a round record carries: its `{peer: value}` keys beyond RoundRecord's."""
    if record.get(SUMMARISED):
        return [key.removesuffix(STATS) for key, value in record.items()
                if key not in ROUND_KEYS and key.endswith(STATS) and isinstance(value, dict)]
    return [key for key, value in record.items() if key not in ROUND_KEYS and isinstance(value, dict)]


def finite_mean(values: Iterable[float | None]) -> float | None:
    """Mean of the finite values (None when there is none)."""
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None


def round_start(consensus_distance: float | None, extra: Mapping[str, float] | None = None,
                sim_time_s: float | None = None) -> RoundStart:
    """Round 0's record, written before the first round (with the method's round metrics of the start, and the
    clock's start when the run keeps one)."""
    record = RoundStart(type="round", round=0, elapsed_s=0.0, consensus_distance=consensus_distance)
    if sim_time_s is not None:
        record["sim_time_s"] = sim_time_s
    record.update(extra or {})  # type: ignore[typeddict-item]
    return record


def round_record(round: int, elapsed_s: float, active: Iterable[int], per_peer: Mapping[int, Mapping[str, float]],
                 consensus_distance: float | None, sent: Mapping[int, int], recv: Mapping[int, int], *,
                 time_compute_s: float, time_comm_s: float, time_wait_s: float, time_local_s: float,
                 round_s: float, network: NetworkRecord, time_schedule_s: float,
                 rejected: Iterable[tuple[int, int]] = (), rolled_back: Iterable[int] = (),
                 cut: Iterable[tuple[int, int]] = (), trim_lowered: Iterable[tuple[int, int]] | None = None,
                 extra: Mapping[str, float] | None = None) -> RoundRecord:
    """The record of round `round` from the peers' metrics (sorted by peer) and bytes sent/received per peer
    (`trim_lowered` only for robust runs, None otherwise), and the method's network-level round metrics
    (`extra`, p2pfl.method.Algorithm.round_metrics)."""
    record: dict[str, Any] = {"type": "round", "round": round, "elapsed_s": elapsed_s, "active": sorted(active),
                              "network": network}
    for key in sorted({k for m in per_peer.values() for k in m}):
        values = {str(p): m[key] for p, m in per_peer.items() if key in m}
        record[key] = values
        record[key + MEAN] = finite_mean(values.values())
    record.update(consensus_distance=consensus_distance, bytes_sent=sum(sent.values()), bytes_recv=sum(recv.values()),
                  bytes_sent_per_peer={str(p): v for p, v in sent.items()}, time_compute_s=time_compute_s,
                  time_comm_s=time_comm_s, time_wait_s=time_wait_s, time_local_s=time_local_s, round_s=round_s,
                  time_schedule_s=time_schedule_s, rejected=[list(pair) for pair in rejected],
                  rolled_back=list(rolled_back), cut=[list(pair) for pair in cut])
    if trim_lowered is not None:
        record["trim_lowered"] = [list(pair) for pair in trim_lowered]
    record.update(extra or {})
    return record  # type: ignore[return-value]


def sim_round(duration: float, clock: float, compute: Mapping[int, float], transfer: Mapping[int, float],
              idle: Mapping[int, float]) -> SimRound:
    """A synchronous round's simulated time: its duration, the clock at its end, the per-peer split."""
    return SimRound(sim_round_s=duration, sim_time_s=clock,
                    sim_compute_s={str(p): v for p, v in sorted(compute.items())},
                    sim_transfer_s={str(p): v for p, v in sorted(transfer.items())},
                    sim_idle_s={str(p): v for p, v in sorted(idle.items())})


def peer_statistics(per_peer: Mapping[int, Mapping[str, Any]]) -> dict[str, float]:
    """Mean, min and max over peers of every numeric per-peer metric, as `<name>_peer_mean` etc."""
    out: dict[str, float] = {}
    for key in sorted({k for m in per_peer.values() for k in m}):
        values = [m[key] for m in per_peer.values() if isinstance(m.get(key), (int, float))]
        if values:
            out[key + PEER_MEAN] = sum(values) / len(values)
            out[key + PEER_MIN] = min(values)
            out[key + PEER_MAX] = max(values)
    return out


def eval_record(round: int, final: bool, metrics: Mapping[str, float],
                per_peer: Mapping[int, Mapping[str, float | str]], sim_time_s: float | None = None) -> EvalRecord:
    """The record of an evaluation: the network metrics joined by the statistics over `per_peer` (and the
    simulated time, when the run keeps the clock)."""
    record = EvalRecord(type="eval", round=round, final=final, metrics={**metrics, **peer_statistics(per_peer)},
                        per_peer={str(p): dict(m) for p, m in per_peer.items()})
    if sim_time_s is not None:
        record["sim_time_s"] = sim_time_s
    return record


# ------------------------------------------------------------------------------------------- summarised records

#: The per-peer dicts of a round record besides the metrics: summarised as `<key>_stats`.
PER_PEER_FIELDS = ("bytes_sent_per_peer", SIM_COMPUTE, SIM_TRANSFER, SIM_IDLE)


def summarises(peers: int, limit: int) -> bool:
    """Whether records about `peers` peers are summarised under --peer-records `limit` (0: never)."""
    return 0 < limit < peers


def peer_stats(values: Iterable[float | None]) -> PeerStats:
    """PeerStats of one quantity's values over the peers: statistics of the finite ones, and the counts (the mean
    is computed as `finite_mean` computes it, so it equals the record's `<name>_mean`)."""
    given = [v for v in values if v is not None]
    finite = [v for v in given if math.isfinite(v)]
    if not finite:
        return PeerStats(mean=None, std=None, min=None, max=None, count=0, nonfinite=len(given))
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / len(finite))
    return PeerStats(mean=mean, std=std, min=min(finite), max=max(finite), count=len(finite),
                     nonfinite=len(given) - len(finite))


def _summarised_network(network: NetworkRecord) -> NetworkRecord:
    """The network entry with its degree dict replaced by `degree_stats`."""
    if "degree" not in network:
        return network
    out = NetworkRecord(**{k: v for k, v in network.items() if k != "degree"})  # type: ignore[typeddict-item]
    out["degree_stats"] = peer_stats(network["degree"].values())
    return out


def summarise_round(record: RoundRecord, peers: int, limit: int) -> RoundRecord | SummarisedRound:
    """The round record as written under --peer-records `limit` for a run of `peers` peers: unchanged at or below
    the limit, else SummarisedRound (each per-peer dict as its PeerStats, in its place)."""
    if not summarises(peers, limit):
        return record
    metrics = set(metric_names(record))
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in metrics or key in PER_PEER_FIELDS:
            out[key + STATS] = peer_stats(value.values())
        elif key == "active":
            inactive = sorted(set(range(peers)) - set(value))
            out.update(active_count=len(value), inactive=inactive if len(inactive) <= limit else None)
        elif key == "network":
            out[key] = _summarised_network(value)
        else:
            out[key] = value
    out[SUMMARISED] = True
    return out  # type: ignore[return-value]


def summarise_eval(record: EvalRecord, limit: int) -> EvalRecord:
    """The eval record as written under --peer-records `limit`: unchanged when it scores at most `limit` peers,
    else `per_peer` emptied into `per_peer_stats` (numbers) and `per_peer_labels` (labels, with peer counts)."""
    per_peer = record["per_peer"]
    if not summarises(len(per_peer), limit):
        return record
    numbers: dict[str, list[float]] = {}
    labels: dict[str, dict[str, int]] = {}
    for metrics in per_peer.values():
        for key, value in metrics.items():
            if isinstance(value, str):
                counts = labels.setdefault(key, {})
                counts[value] = counts.get(value, 0) + 1
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                numbers.setdefault(key, []).append(value)
    out = EvalRecord(**{**record, "per_peer": {}})  # type: ignore[typeddict-item]
    out.update(summarised=True, per_peer_stats={k: peer_stats(v) for k, v in sorted(numbers.items())},
               per_peer_labels={k: dict(sorted(v.items())) for k, v in sorted(labels.items())})
    return out


# ------------------------------------------------------------------------------------------------ summary.json

class CommCounters(TypedDict):
    """One rank's traffic: wire bytes per neighbour rank (the payloads' data; `header_*` the small headers that
    announce each message's size and dtype), logical bytes per peer, seconds in MPI."""

    wire_sent: dict[str, int]
    wire_recv: dict[str, int]
    header_sent: dict[str, int]
    header_recv: dict[str, int]
    peer_sent: dict[str, int]
    peer_recv: dict[str, int]
    time_comm_s: float
    time_wait_s: float


class NetworkSummary(TypedDict):
    """What the network did over the run: its kind, links used per round (mean over rounds, and out of how
    many the topology offered), the peers crashed by the end (the final evaluation covers the others)."""

    kind: str
    links_per_round: float
    topology_links_per_round: float
    crashed: list[int]


class RunSetup(TypedDict):
    """summary["run_setup"]: what the start banner shows of a run (p2pfl.runtime.banner), its defaults in sight.
    None where the run has no such thing (a method without data: consensus; a metric that is no accuracy)."""

    dataset: str | None  # --dataset as the run read it ("fashion-mnist", "npz:PATH")
    classes: int | None  # its number of classes (the partition's)
    partition: str | None  # the partition's label with its parameters ("dirichlet(alpha=0.1)", "iid")
    partition_source: str | None  # "given", "method default", "core default" or "default for own data"
    model: str | None  # --model
    parameters: int | None  # the manifest's model record: every parameter of a peer's network ...
    encoder_parameters: int | None  # ... what --model built ...
    head_parameters: int | None  # ... and what the method put around it
    augment: str | None  # what the local steps do to the training samples ("crop+flip", "crop (no flip)", "none")
    chance: float | None  # the accuracy of guessing, 1 / classes (None: the method is not scored by accuracy)


class _Summary(TypedDict):
    algorithm: str
    topology: str
    peers: int
    rounds: int
    ranks: int
    wall_s: float
    run_dir: str
    final: dict[str, float]
    consensus_distance_initial: float | None
    comm_per_rank: dict[str, CommCounters]
    network: NetworkSummary


class Summary(_Summary, total=False):
    """summary.json: the run, its wall time, the final evaluation's metrics, traffic per rank; then what the
    method adds (`Algorithm.summary`; a method's own entries are declared in a subtype next to the method)."""

    sim_time_s: float  # the simulated clock at the end, in runs that keep one
    setup_s: float  # wall seconds from the command's start (imports aside) to its first round: parsing, network,
    # exchange, run folder and the method's set-up
    dp_epsilon: dict[str, float]  # --dp-clip: each peer's epsilon over the run (DP_EPSILON), at dp_delta
    dp_epsilon_max: float
    dp_delta: float
    scoring: ScoringRecord  # weight-gossip learners: what the final evaluation scored (as the manifest's)
    run_setup: RunSetup  # every run: the dataset, partition (and its source), model, augmentation and chance level
    warnings: list[str]  # every run: what rank 0 warned of at the end ([] for none): a final accuracy at chance


#: summary.json's `status` of a run that ended on an error (a finished run's summary has no `status`).
FAILED = "failed"


class FailedSummary(TypedDict):
    """summary.json of a run that ended on an error after its folder was written: what ran and why it ended."""

    status: str  # FAILED
    reason: str  # one line: the error, or the exit status of bad input (its line is on stderr)
    algorithm: str
    topology: str
    peers: int
    run_dir: str


def is_failed(summary: Mapping[str, Any] | None) -> bool:
    """Whether a summary.json (None: none yet) is a failed run's."""
    return summary is not None and summary.get("status") == FAILED


def _str_keys(value: Any) -> Any:
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value


def summary_record(*, algorithm: str, topology: str, peers: int, rounds: int, ranks: int, wall_s: float,
                   run_dir: str, final: Mapping[str, float], consensus_distance_initial: float | None,
                   comm_per_rank: list[Mapping[str, Any]], network: NetworkSummary,
                   extra: Mapping[str, Any]) -> Summary:
    """summary.json from the run's numbers, each rank's CommStats snapshot and the method's extra entries."""
    comm = {str(r): {k: _str_keys(v) for k, v in s.items()} for r, s in enumerate(comm_per_rank)}
    summary = _Summary(algorithm=algorithm, topology=topology, peers=peers, rounds=rounds, ranks=ranks, wall_s=wall_s,
                       run_dir=run_dir, final=dict(final), consensus_distance_initial=consensus_distance_initial,
                       comm_per_rank=comm, network=network)  # type: ignore[typeddict-item]
    return {**summary, **extra}  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------ manifest.json

class Host(TypedDict):
    """Where one rank ran and the peers it hosted."""

    rank: int
    host: str
    device: str
    peers: list[int]


class Seeds(TypedDict):
    seed: int
    streams: str


class Partition(TypedDict):
    """What every partition record holds: how the data was split, each peer's size and class counts."""

    kind: str
    alpha: float  # --alpha and --beta, whatever the kind (older runs' readers take the label from them)
    beta: float
    parameters: dict[str, Any]  # the partition's own parameters (p2pfl.data.partitions: Partition.record)
    label: str  # "dirichlet(alpha=0.5)", "shard(shards_per_peer=2)": how plots and reports name it
    sizes: list[int]
    class_counts: list[list[int]]  # peers x classes


class _DataPartition(Partition):
    classes: list[str]
    rotation_groups: list[int]


class DataPartition(_DataPartition, total=False):
    """The partition of one dataset over the peers (p2pfl.workload)."""

    groups: list[list[int]]  # natural groups (leaf: users, csv: --natural-column): each peer's, by their number


class _Dataset(TypedDict):
    name: str
    train: int
    test: int


class DatasetInfo(_Dataset, total=False):
    scored_on: str  # "test", or "validation" under --validation (then `test` counts the held-out images)
    validation: int  # --validation: the held-out training images every score is measured on
    validation_fraction: float  # --validation F
    validation_stream: str  # the seeded stream that drew them
    source: str  # a file dataset's path
    seed: int  # synthetic
    noise: float  # synthetic
    digest: str  # npz:, folder: "sha256:<hex>" of the images and labels as the run holds them
    mean: list[float]  # npz:, folder: per channel, the training images' (the normalisation used)
    std: list[float]
    test_split: float  # npz:, folder:, csv: the fraction held out to test, when the files have no test set
    split_seed: int
    label_column: str  # csv: the column of the labels
    features: int  # csv: the length F of a feature vector
    numeric: dict[str, list[float]]  # csv: column -> [mean, std] of its training rows (the standardisation)
    categorical: dict[str, list[str]]  # csv: column -> its categories in the training rows (the one-hot order)
    unseen_categories: dict[str, int]  # csv: column -> test rows whose category no training row has (all zeros)
    impute: str  # csv: what a missing feature value became (none: refused)
    vocabulary: str  # leaf:, sent140: the training text's characters, sorted: token ids 0..; then the unknown token
    unknown_token: str  # leaf:, sent140: the unknown token's name, "<unk>"
    unknown_test_characters: int  # leaf:, sent140: test characters no training text has (read as the unknown token)
    sequence_length: int  # leaf: T + 1 tokens a sample (x, then y)
    padding_token: str  # sent140: the padding token's name, "<pad>" (the last id)
    max_length: int  # sent140: --max-length, the tokens of a sequence (a text cut or padded to it)
    cut_texts: int  # sent140: train and test texts longer than --max-length (cut)
    users: list[str]  # leaf:, femnist:, sent140: the training users, in the order read (the natural groups)
    user_samples: list[int]  # leaf:, femnist:, sent140: each user's training samples
    natural_column: str  # csv: --natural-column, the column of the rows' natural groups
    natural_groups: list[str]  # csv: its values, in the order of their numbers (the groups)


class ModelInfo(TypedDict):
    name: str
    parameters: int
    encoder_parameters: NotRequired[int]  # what --model built (a method's network with an `encoder`)
    head_parameters: NotRequired[int]  # what the method put around it (parameters - encoder_parameters)
    mixed_per_message: int


class NetworkManifest(TypedDict):
    """How the network changes and fails (p2pfl.network.NetworkSchedule.describe): the kind (static,
    resample, or a dynamic topology), the weights, the fault options as resolved (crashes: peer -> first round
    down; stragglers: peer -> share of local steps), and the edges of the support graph."""

    kind: str
    directed: bool
    weights: str
    server: bool
    participation: float
    churn: float
    link_failure: float
    resample_p: float | None
    crashes: dict[str, int]
    stragglers: dict[str, float]
    rejoin: str
    support_edges: int
    period: int | None  # rounds after which a dynamic topology repeats (None: static, or it never repeats)
    exact_consensus_round: int | None  # the round after which the product of its W is exactly J = 11ᵀ/K, if any
    byzantine: list[int]  # attacking peers (--byzantine), excluded from every metric
    attack: str | None
    aggregator: str


class BaseManifest(TypedDict):
    """What every run records at start (p2pfl.runtime.manifest.base_manifest)."""

    command: list[str]
    world_size: int
    config: dict[str, Any]
    versions: dict[str, str]
    git_commit: str | None
    seeds: Seeds
    hosts: list[Host]
    topology: TopologyRecord  # a changing network: its support graph with W averaged over its first rounds
    network: NetworkManifest
    method_defaults: dict[str, Any]  # the options that took the method's paper default (option: value)


class BatchVerdict(TypedDict):
    """One rank's --batch-peers outcome."""

    batched: bool
    why: str


class BatchPeers(TypedDict):
    """manifest["batch_peers"]: the mode asked for and every rank's verdict."""

    mode: str
    ranks: list[BatchVerdict]


class PeerMemory(TypedDict):
    """manifest["memory"]: bytes per peer (p2pfl.runtime.memory). A shard's bytes are what it holds alone: its index
    list when it is a view of the rank's training set ("shards": "views"), else its images and targets ("copies":
    --rotate-groups, FedMuscle's task shards); `shared_bytes_per_rank`: the training set a rank's views share, held
    once (0 where all are copies)."""

    parameters_bytes_per_peer: int
    optimizer_bytes_per_peer: int
    shard_bytes_mean: float
    shard_bytes_max: int
    shards: str
    shared_bytes_per_rank: int


class RankPeak(TypedDict):
    device: str
    peak_bytes: int


class MemoryPeak(TypedDict):
    """manifest["memory_peak"], written at the end: every rank's peak and the largest."""

    per_rank: list[RankPeak]
    max_bytes: int


class ScoringRecord(TypedDict):
    """What a learner's final evaluation scored (p2pfl.algorithms.distinct): manifest["scoring"] and
    summary["scoring"]. Identical models (bitwise: every parameter and buffer) are scored once and their scores
    reported for every peer holding them."""

    models_scored: int  # models scored: the network average (dec-featarc: each cluster's), each other distinct
    # model among the scored peers once
    peers_scored: int  # peers whose scores the evaluation reports (every evaluated peer, or the --eval-peers sample)
    peer_models_distinct: int  # distinct models among those peers
    peers_holding_average: int  # peers whose model is bitwise the network average's: they report its scores
    by_digest: bool  # whether identical models were looked for (False: the method scores every peer's model)


class Manifest(BaseManifest, total=False):
    """manifest.json: the base, then what the method records at set-up (`RunContext.record_manifest`; a method's
    own entries are declared in a subtype next to the method)."""

    host_allocator: str  # every run, at start: what p2pfl.runtime.allocator did to the C allocator
    batch_peers: BatchPeers  # local trainers
    memory: PeerMemory  # local trainers
    dp_sgd: dict[str, Any]  # --dp-clip: clip, delta, noise or target epsilon, accountant, sampling; sigma, q per peer
    memory_peak: MemoryPeak  # every run, at the end
    clock: dict[str, Any]  # runs with the simulated clock: p2pfl.network.timing.NetworkModel.describe, and the mode
    asynchronous: dict[str, Any]  # --mode async: events, batches, end time, message bytes, staleness
    plugins: list[dict[str, Any]]  # every run: p2pfl.plugins.Plugin records (spec, kind, path, sha256); [] for none
    ignored_options: list[str]  # every run: one line per option given that the run does not read (p2pfl.ignored)
    scoring: ScoringRecord  # weight-gossip learners, at the final evaluation: the models it scored

    partition: DataPartition  # methods that train on partitioned data
    dataset: DatasetInfo  # learners
    model: ModelInfo  # learners
