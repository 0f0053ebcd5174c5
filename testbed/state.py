"""Run state on disk, so that a run killed with SIGKILL can be cleaned up by the next one.

A run records, as soon as it creates them, the processes it started (controller, Mininet host shells, workers,
traffic), the OVS bridges and the root-namespace interfaces of the fabric in ``STATE_DIR/state.json``. Every
process a run starts also carries the run's token in its environment (``FLUX_TESTBED_RUN``), inherited by
whatever it starts in turn, so processes that were never recorded (a worker's child, a process started while
the runner was being killed) are found too. A later run that finds the file while the recorded runner is dead
removes exactly those things, nothing found by name: processes by pid (a recorded pid only if its start time is
still the recorded one, since pids get reused; a marked one only if it carries this run's token), bridges and
interfaces by their recorded names.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from typing import Dict, Iterable, List, Optional, Tuple

import psutil

STATE_DIR = os.environ.get("FLUX_STATE_DIR", "/run/flux-testbed")
STATE_FILE = os.path.join(STATE_DIR, "state.json")
MARKER = "FLUX_TESTBED_RUN"
SESSION_MARKER = "FLUX_TEST_SESSION"  # set by the test suite, so that its guard never touches another session's runs
KILL_GRACE_S = 2.0
_PR_SET_PDEATHSIG = 1


def _cmdline(pid: int) -> Optional[str]:
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except (psutil.Error, ValueError):
        return None


def start_time(pid: int) -> Optional[float]:
    """The process's start time (with the pid, a unique identity: a reused pid starts later)."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def environ_value(pid: int, key: str) -> Optional[str]:
    """The value of ``key`` in a process's environment as it started, or None."""
    try:
        return psutil.Process(pid).environ().get(key)
    except (psutil.Error, ValueError):
        return None


def run_token(pid: int) -> Optional[str]:
    """The run token in a process's environment, if it was started by a testbed run."""
    return environ_value(pid, MARKER)


def marked_processes(token: Optional[str] = None, session: Optional[str] = None) -> List[int]:
    """Pids of live processes carrying ``token`` (any testbed token if None), this process excluded; with
    ``session``, only those also started under that test session (``SESSION_MARKER``)."""
    own = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == own:
            continue
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        value = env.get(MARKER)
        if value is None or (token is not None and value != token):
            continue
        if session is not None and env.get(SESSION_MARKER) != session:
            continue
        found.append(proc.pid)
    return found


def die_with_parent(sig: int = signal.SIGKILL):
    """A ``preexec_fn``: the child gets ``sig`` when the process that started it dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec():
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return preexec


def end_processes(targets: Iterable[Tuple[int, int]], grace_s: float = KILL_GRACE_S) -> List[int]:
    """End processes together: each gets its first signal (SIGTERM, or SIGKILL for shells that ignore it), all
    get ``grace_s`` in total to exit, then SIGKILL. ``targets`` are (pid, first signal). Returns the pids that
    were alive. (psutil signals a process only while it is the one first seen: a pid reused meanwhile is
    spared.)"""
    alive = []
    for pid, first in targets:
        try:
            proc = psutil.Process(pid)
            proc.send_signal(first)
            alive.append(proc)
        except (psutil.NoSuchProcess, ValueError):
            pass
    pending = _wait_gone(alive, grace_s)
    for proc in pending:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _wait_gone(pending, 2.0)
    return [proc.pid for proc in alive]


def _wait_gone(procs: List[psutil.Process], timeout_s: float) -> List[psutil.Process]:
    """Wait until the processes are gone; returns those still there. A zombie counts as gone: our own children
    are left for their Popen objects to reap, which keeps their exit status."""
    deadline = time.monotonic() + timeout_s
    pending = list(procs)
    while pending:
        pending = [proc for proc in pending if _running(proc)]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return pending


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _exists(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return _running(psutil.Process(pid))
    except (psutil.Error, ValueError):
        return False


def pid_alive(pid: int) -> bool:
    return psutil.pid_exists(pid)


class RunState:
    """The live record of what this run has created."""

    def __init__(self, run_id: str, out_dir: str):
        self.data: Dict = {"run_id": run_id, "runner_pid": os.getpid(), "runner_start_time": start_time(os.getpid()),
                           "out_dir": out_dir,
                           "token": f"{run_id}:{os.getpid()}:{time.time_ns()}",
                           "started_at": time.time(), "processes": [], "bridges": [], "interfaces": [],
                           "files": []}

    @property
    def token(self) -> str:
        """The value of ``MARKER`` in the environment of every process this run starts."""
        return self.data["token"]

    def add_process(self, pid: int, role: str) -> None:
        self.data["processes"].append({"pid": pid, "role": role, "start_time": start_time(pid),
                                       "cmdline": _cmdline(pid) or ""})
        self.save()

    def add_bridges(self, names: List[str]) -> None:
        self.data["bridges"].extend(names)
        self.save()

    def add_interfaces(self, names: List[str]) -> None:
        self.data["interfaces"].extend(names)
        self.save()

    def add_file(self, path: str) -> None:
        self.data["files"].append(path)
        self.save()

    def save(self) -> None:
        os.makedirs(STATE_DIR, exist_ok=True)
        tmp = STATE_FILE + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, STATE_FILE)

    def clear(self) -> None:
        try:
            os.unlink(STATE_FILE)
        except FileNotFoundError:
            pass


def load() -> Optional[Dict]:
    try:
        with open(STATE_FILE) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:
        return {"processes": [], "bridges": [], "interfaces": [], "files": [], "runner_pid": -1}


def active_run() -> Optional[Dict]:
    """The state of a run whose runner is still alive, if any."""
    st = load()
    if not st or st.get("runner_pid", -1) <= 0 or st["runner_pid"] == os.getpid():
        return None
    if st.get("runner_start_time") is not None:
        return st if start_time(st["runner_pid"]) == st["runner_start_time"] else None
    return st if pid_alive(st["runner_pid"]) else None


def _is_recorded(proc: Dict) -> bool:
    """Whether the recorded process still runs (same pid and start time: not a reused pid)."""
    started = start_time(proc["pid"])
    return started is not None and started == proc.get("start_time") and _exists(proc["pid"])


def _first_signal(role: str) -> int:
    # Mininet's host shells are interactive bash, which ignores SIGTERM; everything else gets a chance to exit.
    return signal.SIGKILL if role.startswith(("host ", "shell ")) else signal.SIGTERM


def run_processes(st: Dict) -> List[Tuple[int, str]]:
    """(pid, role) of every live process of a run: recorded ones that are still themselves, and marked ones."""
    found = {proc["pid"]: proc["role"] for proc in st.get("processes", []) if _is_recorded(proc)}
    if st.get("token"):
        for pid in marked_processes(st["token"]):
            found.setdefault(pid, f"shell or child ({(_cmdline(pid) or '?')[:60]})")
    return sorted(found.items())


def restore_sysctl(path: str, old: str) -> bool:
    """Write a machine-wide setting back to the value a run found (see Testbed._raise_sysctl)."""
    try:
        with open(path, "w") as f:
            f.write(old)
        return True
    except OSError:
        return False


def remove(st: Dict) -> List[str]:
    """Remove everything a (dead) run recorded. Returns a description of what was removed."""
    removed = []
    processes = run_processes(st)
    ended = set(end_processes((pid, _first_signal(role)) for pid, role in processes))
    removed += [f"process {pid} ({role})" for pid, role in processes if pid in ended]
    present = set(_bridges())
    bridges = [br for br in st.get("bridges", []) if br in present]
    if _delete_bridges(bridges):
        removed += [f"bridge {br}" for br in bridges]
    interfaces = [i for i in st.get("interfaces", []) if os.path.exists(f"/sys/class/net/{i}")]
    _delete_interfaces(interfaces)
    removed += [f"interface {i}" for i in interfaces]
    for path in st.get("files", []):
        try:
            os.unlink(path)
            removed.append(f"file {path}")
        except OSError:
            pass
    for path, old in st.get("sysctl_restore", {}).items():
        if restore_sysctl(path, old):
            removed.append(f"{path[len('/proc/sys/'):].replace('/', '.')} restored")
    try:
        os.unlink(STATE_FILE)
    except FileNotFoundError:
        pass
    return removed


def leftovers(st: Dict) -> List[str]:
    """What of a recorded run still exists (used by tests and by the runner's final check)."""
    left = [f"process {pid} ({role})" for pid, role in run_processes(st)]
    out = _bridges()
    left += [f"bridge {b}" for b in st.get("bridges", []) if b in out]
    left += [f"interface {i}" for i in st.get("interfaces", []) if os.path.exists(f"/sys/class/net/{i}")]
    left += [f"file {p}" for p in st.get("files", []) if os.path.exists(p)]
    return left


def _delete_bridges(names: List[str]) -> bool:
    """Delete OVS bridges in one transaction (one ovsdb round trip however many); True if it succeeded."""
    if not names:
        return True
    cmd = ["ovs-vsctl", "--timeout=5"]
    for br in names:
        cmd += ["--", "--if-exists", "del-br", br]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def _delete_interfaces(names: List[str]) -> None:
    for intf in names:
        subprocess.run(["ip", "link", "del", intf], capture_output=True)


def _bridges() -> List[str]:
    r = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True)
    return r.stdout.split()


# ---------------------------------------------------------------------------------- what a run can leave behind
def snapshot(session: Optional[str] = None) -> Dict[str, set]:
    """Everything of the machine a run could leave behind: testbed processes (by their run token; with
    ``session``, only that test session's), OVS bridges, root-namespace interfaces, named network namespaces and
    the state file. Compared before and after by the tests' guard (tests/conftest.py) and by
    bench/kills.py."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {
        "process": {str(pid) for pid in marked_processes(session=session)},
        "bridge": set(_bridges()),
        "interface": set(os.listdir("/sys/class/net")),
        "namespace": {line.split()[0] for line in netns.splitlines() if line.strip()},
        "state file": {STATE_FILE} if os.path.exists(STATE_FILE) else set(),
    }


def new_since(before: Dict[str, set], grace_s: float = 0.0, session: Optional[str] = None) -> Dict[str, List[str]]:
    """What exists now and did not in ``before``, waiting up to ``grace_s`` for it to go away by itself."""
    deadline = time.monotonic() + grace_s
    while True:
        after = snapshot(session)
        new = {kind: sorted(names - before.get(kind, set())) for kind, names in after.items()}
        new = {kind: names for kind, names in new.items() if names}
        if not new or time.monotonic() >= deadline:
            return new
        time.sleep(0.2)


def remove_things(things: Dict[str, List[str]]) -> None:
    """Remove what ``new_since`` found (processes by pid, the rest by name)."""
    end_processes([(int(pid), signal.SIGKILL) for pid in things.get("process", [])])
    _delete_bridges(things.get("bridge", []))
    _delete_interfaces(things.get("interface", []))
    for ns in things.get("namespace", []):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for path in things.get("state file", []):
        if os.path.exists(path):
            os.unlink(path)
