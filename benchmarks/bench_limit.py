"""How far a p2pfl job is from the same work in a bare PyTorch loop: wall, set-up and a round, side by side.

    P2PFL_DATA=... python benchmarks/bench_limit.py                # defaults: K = 16 on 1 and 2 ranks, every case
    python benchmarks/bench_limit.py --peers 16 100                # the issue's grid (about 3x the defaults' time)
    python benchmarks/bench_limit.py --cases fedavg-server --ranks 1 --repeats 5 --batch-peers off
    python benchmarks/bench_limit.py --full --peers 16              # the issue's job: 10 rounds x 20 steps of 32
    python benchmarks/bench_limit.py --device cuda --json out.json  # on a GPU (scripts/gpu-check.sh)

Cases (`--cases`), each on the simple CNN and CIFAR-10 IID (`--dataset`), `--peers` K and `--ranks` R (R > 1 under
`mpirun -n R`, the peers cut into contiguous blocks as p2pfl places them):
  - fedavg-server: `--algorithm fedavg --topology star --mixing server` (MOON's network, SGD lr 0.01, momentum
    0.9, weight decay 1e-5, MOON's crop and flip, cross-entropy); the average of all peers' states every round;
  - dpsgd-ring: the same local steps, then D-PSGD's mix on a ring (`--topology cycle`, Metropolis weights: 1/3
    from each neighbour, 1 - 2/3 from itself);
  - dec-ssl: the main job's objective (`--algorithm dec-ssl --topology cycle`: SimCLR's two views, NT-Xent at
    temperature 0.2, a 128-wide projection, Adam lr 1e-3), mixed on the ring as dpsgd-ring.
Every peer does `--local-steps` steps of `--batch-size` a round on `--images` images of its own (0: the whole
training set cut over the peers), for `--rounds` rounds.

The bare loop is this file's `bare_loop`: per peer its model, its optimiser (state reset each round, as p2pfl
does by default) and its shard with an epoch cursor; a step draws the batch and the augmentation from the same
streams (seed, peer, purpose) and runs forward, loss, backward and the optimiser step; then the plain averaging
step (the server's ordered sum of every peer's flat state times 1/K, or each peer's ordered sum over its ring
neighbourhood), across ranks by a gather (server) or a swap of the boundary peers' states (ring) with mpi4py. It
imports from p2pfl only the arithmetic the job runs too: the dataset reader, the partition, the CNN, MOON's and
SimCLR's augmentations and NT-Xent, the common initialisation and the stream keys; none of the job's machinery
(configuration, placement, transport, checked exchange, records, evaluation). With `--batch-peers off` the
job's models after k rounds equal the bare loop's bit for bit, on one rank and on two (tests/test_bench_limit.py):
the same float32 operations in the same order. With `auto` (on a CPU: peer-stacked for the simple CNN) the job
trains a rank's peers as one grouped computation, equal to float32 rounding (measured: 3e-6 of the distance
training moved the models); that side shows what batching gains over the plain loop, the `off` side what the
framework costs around the same loop.

Each case runs the bare loop and the p2pfl job (once per `--batch-peers` mode) as commands, in turn, `--repeats`
times (the order reversed every other repeat); the table gives medians, one line per mode. Per side: the command's
wall seconds (interpreter and imports included; the job's includes its final evaluation of one peer and the
average, which the bare loop has none of), set-up (from after the imports to the first round: the job's
summary.json `setup_s`, the bare loop's own clock), the bare loop's data loading (the same reader and partition as
the job's; "set-up beyond data" is the job's set-up less it; the JSON also holds the bare loop's `optimiser_s`,
the seconds its optimisers took to make, the first of which imports torch._dynamo), and the median round (the
job's round records' `round_s`, the bare loop's round on rank 0). The ratio p2pfl / bare of the round is the
figure of merit (target: within 1.1x on one rank), then set-up beyond data (target: under 2 s at 16 peers).
Nothing here asserts a target.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("fedavg-server", "dpsgd-ring", "dec-ssl")
#: MOON's local training (p2pfl.algorithms.fedavg.MOON_PAPER) and the Dec-SSL defaults, stated for both sides.
OPTIMISERS = {"fedavg-server": ("sgd", 0.01, 0.9, 1e-5), "dpsgd-ring": ("sgd", 0.01, 0.9, 1e-5),
              "dec-ssl": ("adam", 1e-3, 0.0, 0.0)}
SIMCLR_TEMPERATURE = 0.2  # p2pfl.algorithms.dec_ssl.DEC_SSL_TEMPERATURE
SIMCLR_PROJ = 128
MOON_PROJ = 256


@dataclass
class Sizes:
    """One case's sizes (both sides)."""

    case: str
    peers: int
    ranks: int
    rounds: int
    local_steps: int
    batch_size: int
    images: int  # per peer; 0: the whole training set cut over the peers
    dataset: str = "cifar10"
    seed: int = 0
    device: str = "cpu"
    batch_peers: str = "auto"
    dtype: str = "float32"


def launcher(ranks: int) -> list[str]:
    """`mpirun -n R` (the one beside this interpreter, else PATH's) for R > 1, nothing for one rank."""
    if ranks <= 1:
        return []
    local = Path(sys.executable).parent / "mpirun"
    return [str(local) if local.exists() else "mpirun", "-n", str(ranks)]


def p2pfl_options(s: Sizes) -> dict:
    """The p2pfl job of a case (module docstring), as `p2pfl.simulate`'s keywords."""
    opt, lr, momentum, decay = OPTIMISERS[s.case]
    algorithm = "dec-ssl" if s.case == "dec-ssl" else "fedavg"
    options = {"algorithm": algorithm, "topology": "star" if s.case == "fedavg-server" else "cycle",
               "dataset": s.dataset, "partition": "iid", "model": "simple-cnn", "peers": s.peers,
               "rounds": s.rounds, "local_steps": s.local_steps, "batch_size": s.batch_size, "optimizer": opt,
               "lr": lr, "momentum": momentum, "weight_decay": decay, "seed": s.seed, "device": s.device,
               "threads": 1, "batch_peers": s.batch_peers, "eval_every": 0, "eval_peers": 1, "zeta2_batch": 0,
               "plots": False, "progress": False, "dtype": s.dtype}
    if s.case == "fedavg-server":
        options["mixing"] = "server"
    if s.images:
        options["train_subset"] = s.images * s.peers
    if algorithm == "dec-ssl":
        options.update(temperature=SIMCLR_TEMPERATURE, proj_dim=SIMCLR_PROJ, probe_epochs=1)
    return options


def p2pfl_args(s: Sizes) -> list[str]:
    """`p2pfl_options` as `python -m p2pfl.run`'s arguments."""
    args = []
    for key, value in p2pfl_options(s).items():
        flag = "--" + key.replace("_", "-")
        if value is False:
            args.append("--no-" + key.replace("_", "-"))
        else:
            args += [flag, str(value)]
    return args


# ---------------------------------------------------------------------------------------------- the bare loop

def block(peers: int, ranks: int, rank: int) -> range:
    """Rank r's contiguous peers: [r·⌊K/R⌋ + min(r, K mod R), ...), the first K mod R ranks one more."""
    base, extra = divmod(peers, ranks)
    lo = rank * base + min(rank, extra)
    return range(lo, lo + base + (1 if rank < extra else 0))


def bare_loop(s: Sizes, comm=None, keep_models: bool = False) -> dict:
    """The case's local steps and averaging, plainly (module docstring), in the precision `s.dtype` (torch's
    default dtype meanwhile, as the job's --dtype); its timings, and with `keep_models` each local peer's final
    flat state. `comm`: an mpi4py communicator for several ranks, else None."""
    from p2pfl.runtime.precision import precision

    with precision(s.dtype):
        return _bare_loop(s, comm, keep_models)


def _bare_loop(s: Sizes, comm=None, keep_models: bool = False) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from p2pfl.data.augment import SimCLRAugment, simclr_crop_scale, supervised_apply, supervised_draw
    from p2pfl.data.datasets import ensure_dataset, load_dataset
    from p2pfl.data.partition import random_subset
    from p2pfl.data.partitions import partition
    from p2pfl.losses import nt_xent
    from p2pfl.models.cnn import SimpleCNN
    from p2pfl.models.nets import MoonNet, SimCLRNet
    from p2pfl.models.params import init_model
    from p2pfl.runtime.allocator import keep_freed_memory
    from p2pfl.seeding import SHARED, torch_generator

    start = time.perf_counter()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    torch.set_num_threads(1)
    keep_freed_memory()  # the same process setting as the job's (p2pfl.run calls it too)
    device = torch.device(s.device)
    ssl = s.case == "dec-ssl"
    # -- data: the job's reader, train subset and partition; each peer's shard a contiguous copy on the device
    if rank == 0:
        ensure_dataset(s.dataset)
    if comm is not None:
        comm.Barrier()
    ds = load_dataset(s.dataset)
    x_all, y_all = ds.x_train, ds.y_train
    n = x_all.shape[0]
    if s.images and s.images * s.peers < n:
        keep = torch.as_tensor(random_subset(np.arange(n), s.images * s.peers, s.seed, f"train-subset/{ds.name}"))
        x_all, y_all = x_all[keep], y_all[keep]
    parts = partition(y_all.numpy(), s.peers, "iid", s.seed, num_classes=ds.num_classes)
    mine = list(block(s.peers, size, rank))
    shards = {}
    for p in mine:
        idx = torch.as_tensor(parts[p])
        shards[p] = (x_all[idx].to(device).contiguous(), y_all[idx].to(device))
    data_s = time.perf_counter() - start
    # -- models: one common initialisation, copied to every peer; streams keyed by (seed, peer, purpose)
    channels, side = ds.channels, ds.image_size
    encoder = SimpleCNN(channels, side)
    model = SimCLRNet(encoder, proj_dim=SIMCLR_PROJ) if ssl else MoonNet(encoder, ds.num_classes, proj_dim=MOON_PROJ)
    init_model(model, torch_generator(s.seed, SHARED, "init"))
    model = model.to(device)
    opt_name, lr, momentum, decay = OPTIMISERS[s.case]
    optimisers = time.perf_counter()  # the first torch.optim object imports torch._dynamo: seconds on a CPU
    peers = {}
    for p in mine:
        m = copy.deepcopy(model)
        params = [q for q in m.parameters() if q.requires_grad]
        opt = (torch.optim.Adam(params, lr=lr, weight_decay=decay) if opt_name == "adam"
               else torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=decay))
        peers[p] = {"model": m, "opt": opt, "order": None, "pos": 0,
                    "data_gen": torch_generator(s.seed, p, "data-order", device),
                    "aug_gen": torch_generator(s.seed, p, "augment", device)}
    optimiser_s = time.perf_counter() - optimisers
    tensors = {p: [t for _, t in st["model"].named_parameters()]
               + [b for _, b in st["model"].named_buffers() if b.is_floating_point()] for p, st in peers.items()}
    if ssl:
        views = SimCLRAugment(side, channels, ds.mean, ds.std, scale=(simclr_crop_scale(None, side), 1.0),
                              flip_p=ds.transform.flip_p)
    padding_mode = "reflect" if ds.name == "cifar10" else "constant"  # MOON's CIFAR-10 crop (FedAvg.setup)

    def loss_of(st: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        g = st["aug_gen"]
        if ssl:
            d1, d2 = views.draw(x, g), views.draw(x, g)
            z = st["model"](torch.cat([views.apply(x, d1), views.apply(x, d2)]))[1]
            z1, z2 = z.chunk(2)
            return nt_xent(z1, z2, temperature=SIMCLR_TEMPERATURE)
        inputs = supervised_apply(x, supervised_draw(x, g), ds.mean, ds.std, padding_mode=padding_mode,
                                  flip_p=ds.transform.flip_p, fill=ds.transform.fill)
        return F.cross_entropy(st["model"](inputs)[2], y)

    def flat(p: int) -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1) for t in tensors[p]])

    @torch.no_grad()
    def load(p: int, vec: torch.Tensor) -> None:
        at = 0
        for t in tensors[p]:
            t.copy_(vec[at:at + t.numel()].view(t.shape))
            at += t.numel()

    def average() -> None:
        vecs = {p: flat(p) for p in mine}
        if s.case == "fedavg-server":  # the hub's ordered sum, w = 1/K each
            if comm is not None:
                every = comm.gather(np.stack([vecs[p].cpu().numpy() for p in mine]), root=0)
                if rank == 0:
                    stacked = torch.from_numpy(np.concatenate(every)).to(device)
                    vecs = dict(enumerate(stacked.unbind(0)))
            mean = None
            if rank == 0:
                mean = torch.zeros_like(vecs[0])
                for j in range(s.peers):
                    mean.add_(vecs[j], alpha=1.0 / s.peers)
            if comm is not None:
                mean = torch.from_numpy(comm.bcast(None if mean is None else mean.cpu().numpy(), root=0)).to(device)
            for p in mine:
                load(p, mean)
            return
        # the ring: x_i <- Σ_j W_ij x_j over {i-1, i, i+1} in ascending order (Metropolis on a cycle)
        k = s.peers
        off = 1.0 / 3.0
        own = 1.0 - (off + off)
        if comm is not None:  # the neighbouring ranks' boundary peers
            left, right = (rank - 1) % size, (rank + 1) % size
            got_left = comm.sendrecv(vecs[mine[-1]].cpu().numpy(), dest=right, source=left)
            got_right = comm.sendrecv(vecs[mine[0]].cpu().numpy(), dest=left, source=right)
            vecs[(mine[0] - 1) % k] = torch.from_numpy(got_left).to(device)
            vecs[(mine[-1] + 1) % k] = torch.from_numpy(got_right).to(device)
        new = {}
        for i in mine:
            acc = torch.zeros_like(vecs[i])
            for j in sorted({(i - 1) % k, i, (i + 1) % k}):
                acc.add_(vecs[j], alpha=own if j == i else off)
            new[i] = acc
        for i in mine:
            load(i, new[i])

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    setup_s = time.perf_counter() - start
    round_s = []
    for _ in range(s.rounds):
        sync()
        t0 = time.perf_counter()
        for p in mine:
            st = peers[p]
            x, y = shards[p]
            st["opt"].state.clear()
            st["model"].train()
            b = max(2, min(s.batch_size, x.shape[0]))
            for _ in range(s.local_steps):
                if st["order"] is None or st["pos"] >= x.shape[0] // b:  # a new epoch: the next permutation
                    st["order"] = torch.randperm(x.shape[0], generator=st["data_gen"], device=device)
                    st["pos"] = 0
                idx = st["order"][st["pos"] * b:(st["pos"] + 1) * b]
                st["pos"] += 1
                loss = loss_of(st, x[idx], y[idx])
                st["opt"].zero_grad(set_to_none=True)
                loss.backward()
                st["opt"].step()
        average()
        sync()
        round_s.append(time.perf_counter() - t0)
    out = {"setup_s": setup_s, "data_s": data_s, "optimiser_s": optimiser_s, "round_s": round_s}
    if keep_models:
        out["models"] = {p: flat(p).cpu() for p in mine}
    return out


# ---------------------------------------------------------------------------------------------- the two sides

def command(ranks: int, args: list[str], timeout: float) -> tuple[float, str | None]:
    """Run `python ARGS` (under mpirun for R > 1) from the project's root, one torch thread a process: its wall
    seconds and None, or the reason it failed (its last line on stderr, or the time limit)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([*launcher(ranks), sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return timeout, f"over {timeout:g} s"
    if proc.returncode != 0:
        return 0.0, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return time.perf_counter() - t0, None


def run_p2pfl(s: Sizes, out: Path, timeout: float) -> dict:
    """The job's figures (module docstring), `failed` instead when it did not finish."""
    name = f"{s.case}-{s.peers}-{s.ranks}-{time.monotonic_ns()}"
    wall, failed = command(s.ranks, ["-m", "p2pfl.run", *p2pfl_args(s), "--out", str(out), "--name", name], timeout)
    if failed:
        return {"failed": failed}
    summary = json.loads((out / name / "summary.json").read_text())
    records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    rounds = [r["round_s"] for r in records if r.get("type") == "round" and r["round"] >= 1]
    return {"wall_s": wall, "setup_s": summary["setup_s"], "round_s": statistics.median(rounds),
            "rounds_s": sum(rounds), "eval_s": summary["wall_s"] - sum(rounds)}


def run_bare(s: Sizes, out: Path, timeout: float) -> dict:
    """The bare loop as a command (under mpirun for R > 1): its figures, `failed` when it did not finish."""
    result = out / f"bare-{s.case}-{s.peers}-{s.ranks}-{time.monotonic_ns()}.json"
    wall, failed = command(s.ranks, [str(Path(__file__).resolve()), "--bare", json.dumps(asdict(s)),
                                     "--bare-out", str(result)], timeout)
    if failed:
        return {"failed": failed}
    got = json.loads(result.read_text())
    return {"wall_s": wall, "setup_s": got["setup_s"], "data_s": got["data_s"], "optimiser_s": got["optimiser_s"],
            "round_s": statistics.median(got["round_s"]), "rounds_s": sum(got["round_s"])}


def bare_main(spec: str, out: str, models: str | None = None) -> None:
    """The bare loop's command: rank 0 writes its timings to `out`; with `models`, every rank its peers' final flat
    states to `models`.<rank>.pt (tests)."""
    s = Sizes(**json.loads(spec))
    comm = None
    if s.ranks > 1:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    got = bare_loop(s, comm, keep_models=models is not None)
    rank = 0 if comm is None else comm.Get_rank()
    if models is not None:
        import torch
        torch.save(got.pop("models"), f"{models}.{rank}.pt")
    if rank == 0:
        Path(out).write_text(json.dumps(got))


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if "failed" not in r and key in r]
    return statistics.median(values) if values else None


def row_of(s: Sizes, p2p: list[dict], bare: list[dict]) -> dict:
    """Medians of each side and the ratios."""
    row = {"case": s.case, "peers": s.peers, "ranks": s.ranks, "batch_peers": s.batch_peers, "repeats": len(p2p),
           "failed": sorted({r["failed"] for r in [*p2p, *bare] if "failed" in r})}
    for side, runs in (("p2pfl", p2p), ("bare", bare)):
        for key in ("wall_s", "setup_s", "round_s", "rounds_s", "eval_s", "data_s", "optimiser_s"):
            value = median_of(runs, key)
            if value is not None:
                row[f"{side}_{key}"] = value
    if "p2pfl_round_s" in row and "bare_round_s" in row:
        row["round_ratio"] = row["p2pfl_round_s"] / row["bare_round_s"]
        row["wall_ratio"] = row["p2pfl_wall_s"] / row["bare_wall_s"]
        row["p2pfl_setup_beyond_data_s"] = row["p2pfl_setup_s"] - row["bare_data_s"]
    return row


def table(rows: list[dict]) -> str:
    head = (f"{'case':14s} {'K':>4s} {'R':>2s} {'batch':>5s} | {'wall p2pfl':>10s} {'bare':>6s} {'x':>5s} | "
            f"{'set-up':>6s} {'data':>5s} {'beyond':>6s} {'bare':>5s} | {'round p2pfl':>11s} {'bare':>7s} {'x':>5s} | "
            f"{'eval':>5s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        label = f"{r['case']:14s} {r['peers']:4d} {r['ranks']:2d} {r['batch_peers']:>5s}"
        if "round_ratio" not in r:
            lines.append(f"{label} | failed: {'; '.join(r['failed'])}")
            continue
        lines.append(f"{label} | {r['p2pfl_wall_s']:10.1f} {r['bare_wall_s']:6.1f} {r['wall_ratio']:5.2f} | "
                     f"{r['p2pfl_setup_s']:6.2f} {r['bare_data_s']:5.2f} {r['p2pfl_setup_beyond_data_s']:6.2f} "
                     f"{r['bare_setup_s']:5.2f} | {r['p2pfl_round_s']:11.3f} {r['bare_round_s']:7.3f} "
                     f"{r['round_ratio']:5.2f} | {r['p2pfl_eval_s']:5.1f}"
                     + (f"  ({len(r['failed'])} failed)" if r["failed"] else ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--peers", type=int, nargs="+", default=[16], help="K (the issue's grid: 16 100)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--local-steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--images", type=int, default=64, help="training images per peer (0: the whole set, cut)")
    ap.add_argument("--full", action="store_true",
                    help="the issue's sizes: 10 rounds x 20 steps of 32 on the whole training set")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side, alternating; medians reported")
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-peers", nargs="+", default=["off", "auto"], choices=("auto", "on", "off"),
                    help="the job's --batch-peers, each a side of its own (off: peer by peer, as the bare loop)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a command may take")
    ap.add_argument("--json", type=Path, help="also write the rows (and the sizes) here")
    ap.add_argument("--bare", help=argparse.SUPPRESS)  # the bare loop's command (run_bare)
    ap.add_argument("--bare-out", help=argparse.SUPPRESS)
    ap.add_argument("--bare-models", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare:
        bare_main(args.bare, args.bare_out, args.bare_models)
        return
    if args.full:
        args.rounds, args.local_steps, args.batch_size, args.images = 10, 20, 32, 0
    for name in ("rounds", "local_steps", "batch_size", "repeats"):
        if getattr(args, name) < 1:
            sys.exit(f"bench_limit: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.images < 0 or min(args.peers) < 3 or min(args.ranks) < 1:
        sys.exit("bench_limit: --images must be >= 0, --peers >= 3 (a ring), --ranks >= 1")
    print(f"{args.rounds} rounds x {args.local_steps} steps of {args.batch_size}, "
          f"{args.images or 'all'} images a peer, {args.dataset}, simple-cnn, device {args.device}, "
          f"the job with --batch-peers {' and '.join(args.batch_peers)}, medians of {args.repeats} runs of each side "
          "in turn", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            for peers in args.peers:
                for ranks in args.ranks:
                    sizes = {mode: Sizes(case, peers, ranks, args.rounds, args.local_steps, args.batch_size,
                                         args.images, args.dataset, 0, args.device, mode) for mode in args.batch_peers}
                    runs: dict[str, list[dict]] = {side: [] for side in [*sizes, "bare"]}
                    for rep in range(args.repeats):  # the sides in turn, the order reversed every other repeat
                        order = list(runs) if rep % 2 == 0 else list(runs)[::-1]
                        for side in order:
                            if side == "bare":
                                runs[side].append(run_bare(sizes[args.batch_peers[0]], Path(tmp), args.timeout))
                            else:
                                runs[side].append(run_p2pfl(sizes[side], Path(tmp), args.timeout))
                    for mode, s in sizes.items():
                        rows.append(row_of(s, runs[mode], runs["bare"]))
                        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if not k.startswith("bare")
                                                  and k != "json"}, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
