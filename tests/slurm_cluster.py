"""A one-node Slurm cluster for the tests: munge, slurmctld and slurmd from Debian's packages (22.05), started as
root without systemd under one folder (/tmp/p2pfl-slurm by default), and the client calls the tests need.

    cluster = SlurmCluster().start()        # about 1-2 s once the packages are installed
    job = cluster.sbatch(["launch/slurm.sbatch", "cfg.yaml"], cwd=ROOT)
    assert cluster.wait(job, timeout=120) == "COMPLETED"
    array = cluster.sbatch(["--array=0-3", "script.sh"], cwd=tmp_path, partition="high")
    assert cluster.wait(array) == {f"{array}_{i}": "COMPLETED" for i in range(4)}
    cluster.stop()

Or by hand: `python tests/slurm_cluster.py start|stop` (then `export SLURM_CONF=/tmp/p2pfl-slurm/slurm.conf`).
Install: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge

Everything lives under the folder, nothing under /etc: the cluster runs its own munged on a private socket and key
(`AuthInfo=socket=...`), so a munged that apt's post-install may have started is neither needed nor disturbed;
clients find the cluster through SLURM_CONF (`env`). Its ports (16817/16818) are not Slurm's default ones, so a
real Slurm on the machine is left alone too; a second test session at the same time gets the next folder and ports
(/tmp/p2pfl-slurm-1, 16819/16820; the folder's `lock` is held while a session uses it).

The configuration (see `slurm_conf`): one node with the machine's CPUs (or `cpus`, more than the box has, for bigger
`srun -n`), MpiDefault=pmi2 (the PyPI mpich's ranks find each other through srun's PMI2; with --mpi=none they
silently become singletons), partitions `debug` (default) and `high`: a job in `high` preempts (requeues) one in
`debug`, which first gets its --signal at once and SIGTERM after GraceTime=10 s. `scontrol requeue` sends
SIGCONT+SIGTERM to every process of the job and SIGKILL `kill_wait` seconds later (KillWait; 60 here, Slurm's
default 30, so a slow round on a busy machine still ends with its checkpoint); the job runs again 6-9 s after it
ended (AuthInfo cred_expire=5; Slurm's default 120 delays a restart by 2.5 minutes). Job ids start at a random
FirstJobId in each session. Records of ended jobs stay 300 s (MinJobAge) for `squeue --states=all` and
`scontrol show job`; there is no accounting (sacct), but the job completion log is `log/jobcomp.txt`.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DIR = Path(os.environ.get("P2PFL_SLURM_DIR", "/tmp/p2pfl-slurm"))  # slot 0; see SlurmCluster
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun", "munged", "munge",
            "mungekey")
NODE = "localhost"  # independent of the machine's host name: slurmd runs with -N localhost
#: states after which a job (or an array task) runs no more unless someone requeues it
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                          "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT"})
POLL_S = 0.2
SLOTS = 8


def missing_binaries() -> list[str]:
    """The Slurm and munge programs not found (sbin included: PATH may lack it)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _binary(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if found is None:
        raise FileNotFoundError(f"{name} not found; apt-get install slurmctld slurmd slurm-client munge")
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class SlurmError(RuntimeError):
    pass


class SlurmCluster:
    """A one-node test cluster under `base`; `env` is what a subprocess needs to reach it (SLURM_CONF)."""

    DAEMONS = ("munged", "slurmctld", "slurmd")

    def __init__(self, base: Path | str | None = None, cpus: int | None = None, kill_wait: int = 60,
                 port: int = 16817) -> None:
        """`base` and `port` (slurmctld's; slurmd's is the next) default to the first of SLOTS free folders
        /tmp/p2pfl-slurm, /tmp/p2pfl-slurm-1, ... with ports 16817, 16819, ...: two test sessions at once each get
        their own cluster. `cpus` advertises that many CPUs (more than the machine's, for bigger srun -n)."""
        self._explicit = base is not None
        self.base = Path(base) if base is not None else DEFAULT_DIR
        self.cpus = cpus
        self.kill_wait = kill_wait
        self.ctld_port = port
        self.first_job_id = random.randrange(1000, 60_000_000)
        self._lock: int | None = None
        self._place(self.base, port)

    def _place(self, base: Path, port: int) -> None:
        self.base, self.ctld_port, self.slurmd_port = base, port, port + 1
        self.conf = self.base / "slurm.conf"
        self.log_dir = self.base / "log"
        self.munge_socket = self.base / "munge" / "run" / "munge.socket"
        self.env = {"SLURM_CONF": str(self.conf), "PATH": os.pathsep.join(
            [os.environ.get("PATH", "/usr/bin:/bin"), "/usr/sbin", "/sbin"])}

    def _claim(self) -> None:
        """Lock the folder (flock, held while this process lives), or the next free slot's."""
        import fcntl

        first, port = self.base, self.ctld_port
        for slot in range(1 if self._explicit else SLOTS):
            base = first if slot == 0 else first.with_name(f"{first.name}-{slot}")
            base.mkdir(parents=True, exist_ok=True)
            fd = os.open(base / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._lock = fd
            self._place(base, port + 2 * slot)
            return
        raise SlurmError(f"another session runs its test cluster in {first} (and in every other slot)")

    # ---- daemons -------------------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> SlurmCluster:
        """Write the configuration, start munged, slurmctld and slurmd, and wait until the node is idle."""
        missing = missing_binaries()
        if missing:
            raise SlurmError(f"missing {', '.join(missing)}; apt-get install slurmctld slurmd slurm-client munge")
        t0 = time.monotonic()
        if self._lock is None:
            self._claim()
        self._stop_recorded()  # a cluster that a crashed session left running from this folder
        for port in (self.ctld_port, self.slurmd_port):
            if not _port_free(port):
                raise SlurmError(f"port {port} is taken (another test cluster or slurm daemon?)")
        for sub in ("state", "log", "munge", "pids"):
            shutil.rmtree(self.base / sub, ignore_errors=True)
        for sub in ("state/ctld", "state/d", "log", "pids", "munge/key", "munge/run"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        for path in (self.base, self.base / "munge", self.base / "munge" / "run"):
            path.chmod(0o755)  # munged wants its socket's folders executable by everyone, writable by none else
        (self.base / "munge" / "key").chmod(0o700)
        try:
            self._start_munge()
            self.conf.write_text(self.slurm_conf())
            self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._spawn("slurmd", [_binary("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)])
            state = ""
            while time.monotonic() - t0 < timeout:
                self._check_alive()
                state = self._client(["sinfo", "-h", "-n", NODE, "-o", "%t"], check=False).stdout.strip()
                if state == "idle":
                    return self
                time.sleep(0.1)
            raise SlurmError(f"node not idle after {timeout} s (state {state!r})\n{self.logs()}")
        except BaseException:
            self.stop()
            raise

    def _start_munge(self) -> None:
        munge_dir = self.base / "munge"
        key = munge_dir / "key" / "munge.key"
        subprocess.run([_binary("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
        subprocess.run(["chown", "-R", "munge:munge", str(munge_dir)], check=True)
        setpriv = shutil.which("setpriv")
        user = [setpriv, "--reuid", "munge", "--regid", "munge", "--clear-groups"] if setpriv else []
        self._spawn("munged", [*user, _binary("munged"), "-F", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={munge_dir / 'run' / 'munged.pid'}",
                               f"--seed-file={munge_dir / 'key' / 'munged.seed'}",
                               f"--log-file={munge_dir / 'munged.log'}"])
        for _ in range(100):
            probe = subprocess.run(f"{_binary('munge')} -n -S {self.munge_socket} | {_binary('unmunge')} "
                                   f"-S {self.munge_socket}", shell=True, capture_output=True)
            if probe.returncode == 0:
                return
            self._check_alive()
            time.sleep(0.05)
        raise SlurmError(f"munged does not answer on {self.munge_socket}\n{self.logs()}")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(self.log_dir / f"{name}.out", "wb")  # noqa: SIM115 - the daemon keeps it
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **self.env}, start_new_session=True)
        out.close()
        (self.base / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")

    def _recorded(self) -> dict[str, int]:
        """The daemons this folder's pid files name that still run the program named."""
        alive = {}
        for name in self.DAEMONS:
            path = self.base / "pids" / f"{name}.pid"
            try:
                pid = int(path.read_text())
                stat = Path(f"/proc/{pid}/stat").read_text()  # "pid (comm) state ..."
            except (OSError, ValueError):
                continue
            comm, _, rest = stat.partition("(")[2].rpartition(")")
            if comm == name and rest.split()[0] != "Z":
                alive[name] = pid
        return alive

    def _check_alive(self) -> None:
        dead = [d for d in self.DAEMONS if (self.base / "pids" / f"{d}.pid").exists() and d not in self._recorded()]
        if dead:
            raise SlurmError(f"{', '.join(dead)} exited\n{self.logs()}")

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (SIGTERM, SIGKILL after 10 s)."""
        if "slurmctld" in self._recorded():
            self._client(["scancel", "--quiet", "--user", "root"], check=False)
            deadline = time.monotonic() + self.kill_wait + 5
            while time.monotonic() < deadline and self._client(["squeue", "-h", "-o", "%i"], check=False).stdout:
                time.sleep(0.1)
        self._stop_recorded()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _stop_recorded(self) -> None:
        daemons = self._recorded()
        for name in ("slurmd", "slurmctld", "munged"):
            if name in daemons:
                os.kill(daemons[name], signal.SIGTERM)
        for name, pid in daemons.items():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                try:  # reap it when it is our child
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        break
                except ChildProcessError:
                    pass
                time.sleep(0.05)
            if Path(f"/proc/{pid}").exists() and name in self._recorded():
                os.kill(pid, signal.SIGKILL)
        for name in self.DAEMONS:
            (self.base / "pids" / f"{name}.pid").unlink(missing_ok=True)

    def slurm_conf(self) -> str:
        hw = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
        # "NodeName=host CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
        node = hw.splitlines()[0].split(" ", 1)[1]
        overrides = ""
        if self.cpus is not None:  # advertise more CPUs than the machine has
            memory = re.search(r"RealMemory=\d+", node)
            node = f"CPUs={self.cpus} {memory.group(0) if memory else ''}"
            overrides = "SlurmdParameters=config_overrides"
        b = self.base
        return f"""# written by tests/slurm_cluster.py
ClusterName=p2pfltest
SlurmctldHost={NODE}
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a private munged; requeued jobs wait cred_expire+1 s before running again (Slurm's default: 120)
AuthInfo=socket={self.munge_socket},cred_expire=5
StateSaveLocation={b}/state/ctld
SlurmdSpoolDir={b}/state/d
SlurmctldPidFile={b}/state/slurmctld.pid
SlurmdPidFile={b}/state/slurmd.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmi2
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={b}/log/jobcomp.txt
MailProg=/bin/true
InactiveLimit=0
KillWait={self.kill_wait}
MinJobAge=300
# job ids differ from one session to the next: MPICH names its shared memory after srun's JOBID.STEP, and a
# segment that a killed rank left in /dev/shm would break the MPI_Init of a later job with the same id
FirstJobId={self.first_job_id}
{overrides}
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
NodeName={NODE} NodeAddr=127.0.0.1 {node} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=10
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
"""

    def logs(self, lines: int = 40) -> str:
        """The last lines of every daemon's log, for failure messages."""
        parts = []
        for path in sorted(self.log_dir.glob("*")) + [self.base / "munge" / "munged.log"]:
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"==> {path} <==\n" + "\n".join(text))
        return "\n".join(parts)

    # ---- clients -------------------------------------------------------------------------------------------
    def _client(self, args: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        env.update(self.env)
        env.update(kwargs.pop("env", None) or {})
        result = subprocess.run([_binary(args[0]), *args[1:]], capture_output=True, text=True, env=env, **kwargs)
        if check and result.returncode != 0:
            raise SlurmError(f"{' '.join(args)}: exit {result.returncode}: {result.stderr.strip()}")
        return result

    def sbatch(self, args: list[str], cwd: Path | str | None = None, env: dict[str, str] | None = None,
               partition: str | None = None) -> int:
        """Submit `sbatch [--partition P] ARGS` from `cwd` with the caller's environment plus `env`; the job id
        (an array's own id: its tasks are JOBID_0, JOBID_1, ...)."""
        extra = [f"--partition={partition}"] if partition else []
        result = self._client(["sbatch", "--parsable", *extra, *args], cwd=cwd, env=env)
        return int(result.stdout.strip().split(";")[0])  # "id" or "id;cluster"

    def states(self, job_id: int | str) -> dict[str, str]:
        """{"123": state} for a job, {"123_0": state, "123_1": ...} for an array (pending tasks included)."""
        result = self._client(["squeue", "--states=all", "--array", "--noheader", "--format=%i|%T",
                               f"--jobs={job_id}"], check=False)
        out = {}
        for line in result.stdout.splitlines():
            key, _, state = line.strip().partition("|")
            out[key] = state
        if not out:  # squeue forgets nothing for MinJobAge, but ask the controller before giving up
            shown = self._client(["scontrol", "show", "job", "--oneliner", str(job_id)], check=False)
            for line in shown.stdout.splitlines():
                job = re.search(r"\bJobId=(\d+)", line)
                array = re.search(r"\bArrayJobId=(\d+)", line)
                task = re.search(r"\bArrayTaskId=(\S+)", line)
                state = re.search(r"\bJobState=(\S+)", line)
                if job and state:
                    key = f"{array.group(1)}_{task.group(1)}" if array and task else job.group(1)
                    out[key] = state.group(1)
        if not out:
            raise SlurmError(f"no job {job_id}: {result.stderr.strip()}")
        return dict(sorted(out.items(), key=lambda kv: [int(n) for n in re.findall(r"\d+", kv[0])]))

    def state(self, job_id: int | str) -> str:
        """The state of a job or of one array task ("123_4")."""
        states = self.states(job_id)
        if len(states) != 1:
            raise SlurmError(f"{job_id} is an array of {len(states)} tasks: use states()")
        return next(iter(states.values()))

    def ended(self, job_id: int | str) -> bool:
        """Whether the job, or every task of an array, has ended."""
        return all(s in FINAL_STATES for s in self.states(job_id).values())

    def wait(self, job_id: int | str, timeout: float = 120) -> str | dict[str, str]:
        """Poll every POLL_S until the job, or every task of an array, has ended (a requeued job runs again
        first); its final state, or for an array the tasks' states by task ("123_0": ..., in task order)."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states(job_id)
            if all(s in FINAL_STATES for s in states.values()):
                return states[str(job_id)] if set(states) == {str(job_id)} else states
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {states} after {timeout} s\n{self.show(job_id)}")
            time.sleep(POLL_S)

    def show(self, job_id: int | str) -> str:
        """`scontrol show job` (every task of an array), for failure messages."""
        return self._client(["scontrol", "show", "job", str(job_id)], check=False).stdout

    def requeue(self, job_id: int | str) -> None:
        self._client(["scontrol", "requeue", str(job_id)])

    def cancel(self, job_id: int | str, signal_name: str | None = None) -> None:
        self._client(["scancel", *([f"--signal={signal_name}"] if signal_name else []), str(job_id)])


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in ("start", "stop"):
        sys.exit("usage: python tests/slurm_cluster.py start|stop  (in $P2PFL_SLURM_DIR, else /tmp/p2pfl-slurm)")
    cluster = SlurmCluster(DEFAULT_DIR)  # by hand: slot 0 only, and never while a test session holds it
    if command == "start":
        cluster.start()
        print(f"up; export SLURM_CONF={cluster.conf}")
    else:
        cluster._claim()
        cluster.stop()
