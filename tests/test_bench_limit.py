"""benchmarks/bench_limit.py's bare loop does the job's work: after k rounds its models equal the p2pfl job's.

The expectation is the p2pfl job itself (`python -m p2pfl.run`, its peers' models read from its checkpoint of the
last round), an implementation the bare loop shares only the arithmetic pieces with (reader, partition, CNN,
augmentations, loss, initialisation, stream keys). Peer by peer (`--batch-peers off`) the two are the same
float32 operations in the same order, so they must agree bit for bit, on one rank and on two (the bare loop's
own gather and boundary swap against the job's transport). Peer-stacked (`--batch-peers on`, the default's
choice on a CPU) the job's grouped convolutions sum in another order, so there both run in float64 and agree to
a bound derived from float64 rounding and the steps' operation count (below), which holds on any CPU's kernels.
Tiny sizes on the synthetic data set, so nothing is read from disk.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from p2pfl.models.cnn import SimpleCNN
from p2pfl.models.nets import MoonNet, SimCLRNet
from p2pfl.runtime.checkpoint import load_peer

from conftest import ROOT, run_job

_spec = importlib.util.spec_from_file_location("bench_limit", ROOT / "benchmarks" / "bench_limit.py")
bench_limit = importlib.util.module_from_spec(_spec)
sys.modules["bench_limit"] = bench_limit
_spec.loader.exec_module(bench_limit)

PEERS, ROUNDS = 4, 2


def sizes(case: str, ranks: int = 1, batch_peers: str = "off", dtype: str = "float32") -> bench_limit.Sizes:
    return bench_limit.Sizes(case, PEERS, ranks, ROUNDS, local_steps=3, batch_size=8, images=24, dataset="synthetic",
                             batch_peers=batch_peers, dtype=dtype)


def job_models(s: bench_limit.Sizes, runs: Path, name: str) -> dict[int, torch.Tensor]:
    """The p2pfl job's peers' flat states after the last round (parameters, then floating buffers: the bare loop's
    order), from its checkpoint; one rank in this process (`p2pfl.simulate`), more under mpirun."""
    if s.ranks == 1:
        import p2pfl
        p2pfl.simulate(**bench_limit.p2pfl_options(s), out=str(runs), name=name, checkpoint_every=ROUNDS, quiet=True)
    else:
        args = ["-m", "p2pfl.run", *bench_limit.p2pfl_args(s), "--out", str(runs), "--name", name,
                "--checkpoint-every", str(ROUNDS)]
        proc = run_job(args, ranks=s.ranks)
        assert proc.returncode == 0, proc.stderr[-2000:]
    like = SimCLRNet(SimpleCNN(3, 32), 128) if s.case == "dec-ssl" else MoonNet(SimpleCNN(3, 32), 10, 256)
    names = [n for n, _ in like.named_parameters()] + [n for n, b in like.named_buffers() if b.is_floating_point()]
    out = {}
    for p in range(s.peers):
        state = load_peer(runs / name, p, ROUNDS, torch.device("cpu"))["model"]
        out[p] = torch.cat([state[n].reshape(-1) for n in names])
    return out


def initial_model(case: str) -> torch.Tensor:
    """The common initialisation every peer starts from, flat (the reference for how far training moves)."""
    from p2pfl.models.params import init_model
    from p2pfl.seeding import SHARED, torch_generator

    model = SimCLRNet(SimpleCNN(3, 32), 128) if case == "dec-ssl" else MoonNet(SimpleCNN(3, 32), 10, 256)
    init_model(model, torch_generator(0, SHARED, "init"))
    return torch.cat([t.detach().reshape(-1) for t in model.parameters()]
                     + [b.reshape(-1) for b in model.buffers() if b.is_floating_point()])


@pytest.mark.parametrize("case", bench_limit.CASES)
def test_bare_loop_equals_the_job_bitwise_peer_by_peer(case: str, runs_dir: Path) -> None:
    s = sizes(case)
    expected = job_models(s, runs_dir, case)
    got = bench_limit.bare_loop(s, keep_models=True)
    assert sorted(got["models"]) == list(range(PEERS))
    assert len(got["round_s"]) == ROUNDS
    for p in range(PEERS):
        assert torch.equal(got["models"][p], expected[p]), f"{case}: peer {p} differs"
    if case == "fedavg-server":  # the server leaves every peer with the one average
        assert all(torch.equal(got["models"][p], got["models"][0]) for p in range(PEERS))
    else:  # the ring mixes neighbourhoods: peers differ
        assert not torch.equal(got["models"][0], got["models"][2])


#: Under mpirun -n 2: for each case (a Sizes as JSON), the p2pfl job by its command line's entry point, then the
#: bare loop over mpi4py, each rank saving its peers' models; one launch for every case.
TWO_RANKS = """
import json, sys
from pathlib import Path
import torch
from mpi4py import MPI
sys.path.insert(0, sys.argv[1])
import bench_limit
from p2pfl.run import main
out = Path(sys.argv[2])
for spec in sys.argv[3:]:
    s = bench_limit.Sizes(**json.loads(spec))
    assert main([*bench_limit.p2pfl_args(s), "--out", str(out), "--name", s.case, "--checkpoint-every",
                 str(s.rounds)]) == 0
    got = bench_limit.bare_loop(s, MPI.COMM_WORLD, keep_models=True)
    torch.save(got["models"], out / f"{s.case}.bare.{MPI.COMM_WORLD.Get_rank()}.pt")
"""


def test_bare_loop_on_two_ranks_equals_the_job_bitwise(runs_dir: Path, tmp_path: Path) -> None:
    """Two ranks: the bare loop's gather (server) and swap of boundary peers (ring) over mpi4py against the job's
    transport, the job started from `p2pfl_args` (the benchmark's command line)."""
    cases = ["fedavg-server", "dpsgd-ring"]
    script = tmp_path / "two_ranks.py"
    script.write_text(TWO_RANKS)
    specs = [json.dumps(bench_limit.asdict(sizes(case, ranks=2))) for case in cases]
    proc = run_job([str(script), str(ROOT / "benchmarks"), str(runs_dir), *specs], ranks=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    like = MoonNet(SimpleCNN(3, 32), 10, 256)
    names = [n for n, _ in like.named_parameters()]
    for case in cases:
        got = {**torch.load(runs_dir / f"{case}.bare.0.pt"), **torch.load(runs_dir / f"{case}.bare.1.pt")}
        assert sorted(got) == list(range(PEERS))
        for p in range(PEERS):
            state = load_peer(runs_dir / case, p, ROUNDS, torch.device("cpu"))["model"]
            expected = torch.cat([state[n].reshape(-1) for n in names])
            assert torch.equal(got[p], expected), f"{case}: peer {p} differs"


@pytest.mark.numerics
def test_bare_loop_against_the_peer_stacked_job_to_float_rounding(runs_dir: Path) -> None:
    """Peer-stacked, the job's steps sum in another order than the bare loop's, so the models differ by rounding
    only. Both run in float64 (--dtype), where the bound follows from rounding, not from one machine: each of the
    T steps' sums has at most n terms (n = the longest reduction of a step: the first convolution's weight gradient
    over batch × side² positions), so a weight can differ by at most T · n · u · max|x0| (u = 2^-53, the unit
    roundoff; Higham's γ_n per sum, one rounding chain a step). A float32 job against the same float64 loop is
    outside it (its rounding is 2^29 times coarser), and so is any wrong batch, draw or step (~a step's size)."""
    s = sizes("fedavg-server", batch_peers="on", dtype="float64")
    expected = job_models(s, runs_dir, "stacked")
    got = bench_limit.bare_loop(s, keep_models=True)["models"]
    x0 = initial_model("fedavg-server").double()
    steps = ROUNDS * s.local_steps
    longest_sum = max(s.batch_size * 32 * 32, max(m.in_features for m in _linears()))
    bound = steps * longest_sum * 2.0 ** -53 * x0.abs().max()
    for p in range(PEERS):
        assert expected[p].dtype == got[p].dtype == torch.float64
        assert (expected[p] - x0).abs().max() > 1e3 * bound  # training moved the models far beyond it
        assert (got[p] - expected[p]).abs().max() <= bound
    single = job_models(sizes("fedavg-server", batch_peers="on", dtype="float32"), runs_dir, "single")
    assert max((single[p].double() - got[p]).abs().max() for p in range(PEERS)) > bound


def _linears() -> list[torch.nn.Linear]:
    return [m for m in MoonNet(SimpleCNN(3, 32), 10, 256).modules() if isinstance(m, torch.nn.Linear)]


def test_the_benchmark_prints_and_writes_its_rows(tmp_path: Path) -> None:
    """One case end to end: both sides ran, the medians and the ratio are those of the runs."""
    out = tmp_path / "rows.json"
    proc = run_job([str(ROOT / "benchmarks" / "bench_limit.py"), "--cases", "fedavg-server", "--peers", "4",
                    "--ranks", "1", "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--images", "16",
                    "--repeats", "1", "--dataset", "synthetic", "--batch-peers", "off", "--json", str(out)],
                   ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and not rows[0]["failed"] and rows[0]["batch_peers"] == "off"
    row = rows[0]
    assert row["round_ratio"] == pytest.approx(row["p2pfl_round_s"] / row["bare_round_s"])
    assert row["p2pfl_setup_beyond_data_s"] == pytest.approx(row["p2pfl_setup_s"] - row["bare_data_s"])
    assert "fedavg-server" in proc.stdout.splitlines()[-1]


def test_bad_sizes_are_one_line_and_exit_before_running() -> None:
    proc = run_job([str(ROOT / "benchmarks" / "bench_limit.py"), "--rounds", "0"], ranks=0)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["bench_limit: --rounds must be at least 1, got 0"]
