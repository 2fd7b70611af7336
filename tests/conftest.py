"""Shared test helpers: launching jobs under mpirun, finding the project's data."""
from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

# Property tests (hypothesis): a fixed example sequence under CI, so a submission's result does not depend on the
# draw; fresh random examples on every local run, which is where new counterexamples are found.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# Under pytest-xdist the cores are shared with the other workers, so the waiting ranks of the jobs tests start sleep
# between polls rather than spin (p2pfl.comm.world.poll_until), even where a job's own ranks fit the cores.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("P2PFL_OVERSUBSCRIBED", "1")


def mpirun_path() -> str | None:
    """The mpirun beside this interpreter (the mpich wheel), else one on PATH."""
    local = Path(sys.executable).parent / "mpirun"
    return str(local) if local.exists() else shutil.which("mpirun")


#: P2PFL_TEST_FRESH=1: every one-process `python -m p2pfl.run` of run_job in a fresh interpreter, as before they ran
#: in the test's process (to check that the two agree, or to bisect a leak between runs).
FRESH = os.environ.get("P2PFL_TEST_FRESH") == "1"


def run_job(args: list[str], ranks: int = 1, timeout: float = 240, cwd: Path | None = None,
            env: dict | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run `python ARGS` under `mpirun -n ranks` (or plainly for ranks=0) and capture its output.

    A one-process `-m p2pfl.run` runs in this process (`in_process`), as a study's pooled worker runs its points:
    the same `p2pfl.run.main` with the process-wide state put back afterwards, without paying a fresh interpreter's
    imports (seconds a run). `fresh=True` where the fresh interpreter is what the test is about."""
    fresh = fresh or FRESH or "PYTHONPATH" in (env or {})  # a path only a fresh interpreter's start reads
    if ranks == 0 and args[:2] == ["-m", "p2pfl.run"] and not fresh:
        return in_process(args[2:], timeout=timeout, cwd=cwd or ROOT, env=env)
    cmd = [sys.executable, *args]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    if ranks > 0:
        launcher = mpirun_path()
        if launcher is None:
            pytest.skip("no mpirun available")
        if not fresh and (args[:2] == ["-m", "p2pfl.run"] or args[0].endswith(".py")):
            return _POOL.run(launcher, ranks, args, timeout, cwd or ROOT, full_env)
        _POOL.close()  # a job launched afresh gets the memory this worker's kept ranks would hold
        cmd = [launcher, "-n", str(ranks), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT, env=full_env)


class MpiPool:
    """Jobs under mpirun on ranks kept for the session (tests/mpi/server.py), one server a rank count: each job
    runs as a fresh `mpirun -n R python ARGS` would, without paying R interpreters and torch's imports again (2-5 s
    of a core a rank). A job that aborts ends its server (the next job starts another), as it ends its launch;
    mpirun's own output then ends the job's stderr. `fresh=True` in run_job (signals, the launcher, a fresh
    interpreter's imports) or P2PFL_TEST_FRESH=1 launch each job instead."""

    def __init__(self) -> None:
        self._servers: dict[int, tuple[subprocess.Popen, Path, int]] = {}  # ranks: (mpirun, folder, jobs sent)

    def _server(self, launcher: str, ranks: int, env: dict) -> tuple[subprocess.Popen, Path, int]:
        import tempfile

        found = self._servers.get(ranks)
        if found is not None and found[0].poll() is None:
            return found
        folder = Path(tempfile.mkdtemp(prefix=f"p2pfl-mpi{ranks}-"))
        log = (folder / "mpirun.log").open("w")
        proc = subprocess.Popen([launcher, "-n", str(ranks), sys.executable, str(ROOT / "tests" / "mpi" / "server.py"),
                                 str(folder), str(os.getpid())], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=env, start_new_session=True)
        log.close()
        self._servers[ranks] = found = (proc, folder, 0)
        return found

    def run(self, launcher: str, ranks: int, args: list[str], timeout: float, cwd: Path,
            env: dict) -> subprocess.CompletedProcess:
        """`mpirun -n ranks python ARGS` (cwd, the whole environment `env`) on the kept ranks."""
        import time

        from p2pfl.runtime.files import write_atomic

        proc, folder, sent = self._server(launcher, ranks, env)
        n = sent + 1
        self._servers[ranks] = (proc, folder, n)
        log_start = (folder / "mpirun.log").stat().st_size
        write_atomic(folder / f"{n}.json", json.dumps({"argv": args, "env": env, "cwd": str(cwd)}))
        codes = [folder / f"{n}.{rank}.rc" for rank in range(ranks)]
        deadline = time.monotonic() + timeout
        pause = 1e-3
        while not all(code.exists() for code in codes):
            if proc.poll() is not None:  # aborted: mpirun ended every rank
                break
            if time.monotonic() > deadline:
                self._stop(ranks)
                raise subprocess.TimeoutExpired(["mpirun", "-n", str(ranks), *args], timeout)
            time.sleep(pause)
            pause = min(2 * pause, 0.02)

        def read(name: str) -> str:
            path = folder / name
            return path.read_text(errors="replace") if path.exists() else ""

        stdout = "".join(read(f"{n}.{rank}.out") for rank in range(ranks))
        stderr = "".join(read(f"{n}.{rank}.err") for rank in range(ranks))
        if all(code.exists() for code in codes):  # every rank finished the job (the server may end after it)
            statuses = [int(code.read_text()) for code in codes]
            rc = next((s for s in statuses if s != 0), 0)
            if (folder / "retired").exists() or proc.poll() is not None:
                self._stop(ranks, grace=60)
        else:  # aborted: mpirun ended every rank
            proc.wait()
            with (folder / "mpirun.log").open(errors="replace") as log:
                log.seek(log_start)
                stderr += log.read()
            rc = proc.returncode or 1
            self._stop(ranks)
        return subprocess.CompletedProcess(["mpirun", "-n", str(ranks), sys.executable, *args], rc, stdout, stderr)

    def _stop(self, ranks: int, grace: float = 0) -> None:
        import signal

        proc, folder, _ = self._servers.pop(ranks)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Stop every server (a stop job, then a kill after a grace)."""
        for ranks in list(self._servers):
            proc, folder, sent = self._servers[ranks]
            if proc.poll() is None:
                from p2pfl.runtime.files import write_atomic

                write_atomic(folder / f"{sent + 1}.json", json.dumps({"stop": True}))
            self._stop(ranks, grace=10)


_POOL = MpiPool()


#: Seconds each test module took in a measured run of the suite (`P2PFL_TEST_MODULE_SECONDS=tests/module_seconds.json
#: bash scripts/test.sh` writes it): the modules go to the workers longest first.
MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadfile`) a module's tests run on one worker one after the other (a
    module-scoped run is made once for all the tests that read it), and the modules are handed out in the order of
    their items: the longest (MODULE_SECONDS) first, so that no long module starts last and keeps one worker busy
    while the others have nothing left (a module not measured yet goes last)."""
    seconds = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.is_file() else {}
    items.sort(key=lambda item: -seconds.get(_module(item.nodeid), 0.0))  # stable: a module keeps its order


_SPENT: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Seconds a module, for MODULE_SECONDS."""
    if os.environ.get("P2PFL_TEST_MODULE_SECONDS"):
        _SPENT[_module(report.nodeid)] = _SPENT.get(_module(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("P2PFL_TEST_MODULE_SECONDS")
    if path and _SPENT and not hasattr(session.config, "workerinput"):  # the xdist controller, or one process
        Path(path).write_text(json.dumps({m: round(s, 1) for m, s in sorted(_SPENT.items())}, indent=1) + "\n")


def in_process(argv: list[str], timeout: float = 240, cwd: Path = ROOT, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    """`python -m p2pfl.run ARGV` run in this process, as p2pfl.study.worker runs a pooled point (its equality to a
    subprocess is tests/test_study_pool.py's): file descriptors 1 and 2 (and sys.stdout, sys.stderr) go to files,
    `env` and `cwd` apply inside, plug-ins it loads are forgotten, the process-wide state it changed is put back.
    Past `timeout` the test process dumps every thread's stack and exits, as a hung subprocess would be killed."""
    import faulthandler
    import tempfile

    import p2pfl.run
    from p2pfl.plugin_scope import isolated
    from p2pfl.study.worker import exit_status, fresh_point, output_to

    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            with isolated(), output_to(str(out), str(err), python_streams=True), fresh_point(p2pfl.run.__file__, argv):
                os.environ.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})})
                os.chdir(cwd)
                rc = exit_status(argv)
        finally:
            faulthandler.cancel_dump_traceback_later()
        return subprocess.CompletedProcess(["-m", "p2pfl.run", *argv], rc, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))


@pytest.fixture(scope="session", autouse=True)
def _imports_frozen() -> Iterator[None]:
    """What is alive once the tests are collected (pytest, torch, every test module and what it imported) is kept
    out of the garbage collector's passes (gc.freeze): otherwise each full collection, two an in-process run (the
    pooled point's clean-up, Python's own), walks those 600,000 objects again (0.3-0.7 s a pass)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
    _POOL.close()


@pytest.fixture(scope="module", autouse=True)
def _plugins_forgotten() -> Iterator[None]:
    """Plug-ins a test module loads (its examples, a simulate(plugins=...)) are forgotten after it, so the next
    module sees only the built-ins (their names in the registries, their options in the configuration)."""
    from p2pfl.plugin_scope import isolated

    with isolated():
        yield


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The data root and ~/.cache of the test its own (the caches of decoded and parsed files are written there, and
    runs it starts inherit them); returns the data root."""
    monkeypatch.setenv("P2PFL_DATA", str(tmp_path / "root"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "root"


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def slurm():
    """One Slurm cluster (tests/slurm_cluster.py) for the whole session, stopped at its end; tests using it are
    marked `slurm`. Skipped unless root with Debian's slurmctld, slurmd, slurm-client and munge installed."""
    from slurm_cluster import SlurmCluster, missing_binaries

    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster runs its daemons as root: run the slurm tests as root")
    missing = missing_binaries()
    if missing:
        pytest.skip(f"no Slurm here ({', '.join(missing)} not found): apt-get install -y "
                    "--no-install-recommends slurmctld slurmd slurm-client munge")
    cluster = SlurmCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def timing_free_records(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl records without their wall-clock fields (what must agree across layouts)."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.append({k: v for k, v in record.items() if not k.startswith("time_") and k not in ("elapsed_s", "round_s")})
    return out


def one_and_two_ranks_agree(args: list[str], runs: Path) -> list[dict]:
    """Run `python ARGS` (a p2pfl.run command writing under `runs`) on one process and under mpirun -n 2, assert
    that their records (timings aside), dataset and partition entries agree bit for bit, and return the manifests
    (one, two)."""
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*args, "--name", name], ranks=ranks)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert timing_free_records(runs / "two") == timing_free_records(runs / "one")
    manifests = [json.loads((runs / n / "manifest.json").read_text()) for n in ("one", "two")]
    assert manifests[0]["dataset"] == manifests[1]["dataset"] and manifests[1]["world_size"] == 2
    assert manifests[0]["partition"] == manifests[1]["partition"]
    return manifests


def same_records_on_ranks(script: str, tmp_path: Path, timeout: float = 600) -> dict[str, list[dict]]:
    """Run the tests/mpi `script` (one run folder per run under its OUT) in one process and under mpirun -n 2 and
    4, assert that every run's records are equal bit for bit (timings aside) and that no receive timed out, and
    return the one-process records by run name."""
    from golden_cases import normalise

    outputs = {}
    for ranks in (0, 2, 4):
        out = tmp_path / f"r{ranks}"
        proc = run_job([script, str(out)], ranks=ranks, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "timeout" not in proc.stderr
        outputs[ranks] = {d.name: normalise(d / "metrics.jsonl") for d in sorted(out.iterdir())}
    for name, recs in outputs[0].items():
        assert recs == outputs[2][name] == outputs[4][name], name  # bitwise, timings aside
    return outputs[0]


def runs_on_ranks(runs: dict[str, list[str]], ranks: int, tmp_path: Path, timeout: float = 600) -> None:
    """Every command line of `runs` (name: p2pfl.run's arguments, without `-m p2pfl.run`) in one job under
    `mpirun -n ranks` (tests/mpi/runs.py), or in this process one after the other for ranks=0: several cases a
    launch, where a launch each would pay R interpreters' start-up and imports a case."""
    if ranks == 0:
        for name, argv in runs.items():
            proc = in_process(argv, timeout=timeout)
            assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
        return
    spec = tmp_path / f"runs-{ranks}.json"
    spec.write_text(json.dumps(runs))
    proc = run_job([str(ROOT / "tests" / "mpi" / "runs.py"), str(spec)], ranks=ranks, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]


def four_ranks_equal_one(args: list[str], runs_dir: Path, timeout: float = 400) -> list[dict]:
    """Run `python ARGS` under mpirun -n 4 (run folder runs_dir/four) and in one process (runs_dir/one), assert
    that their records are equal bit for bit, and return the 4-rank records."""
    for ranks, name in ((4, "four"), (0, "one")):
        proc = run_job([*args, "--out", str(runs_dir), "--name", name], ranks=ranks, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
    four = timing_free_records(runs_dir / "four")
    assert four == timing_free_records(runs_dir / "one")  # the same numbers, bit for bit
    return four
