"""Run state on disk, so that a run killed with SIGKILL can be cleaned up by the next one.

A run records, as soon as it creates them, the processes it started (controller, Mininet host shells, workers),
the OVS bridges and the root-namespace interfaces of the fabric in ``STATE_DIR/state.json``. A later run that
finds the file while the recorded runner is dead removes exactly those things, nothing found by name: processes
are ended by pid (after checking their command line still is what was recorded, since pids get reused),
bridges and interfaces by their recorded names.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Dict, List, Optional

STATE_DIR = os.environ.get("FLUX_STATE_DIR", "/run/flux-testbed")
STATE_FILE = os.path.join(STATE_DIR, "state.json")


def _cmdline(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunState:
    """The live record of what this run has created."""

    def __init__(self, run_id: str, out_dir: str):
        self.data: Dict = {"run_id": run_id, "runner_pid": os.getpid(), "out_dir": out_dir,
                           "started_at": time.time(), "processes": [], "bridges": [], "interfaces": [],
                           "files": []}

    def add_process(self, pid: int, role: str) -> None:
        self.data["processes"].append({"pid": pid, "role": role, "cmdline": _cmdline(pid) or ""})
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
    if st and st.get("runner_pid", -1) > 0 and st["runner_pid"] != os.getpid() and pid_alive(st["runner_pid"]):
        cmd = _cmdline(st["runner_pid"]) or ""
        if "run.py" in cmd or "testbed" in cmd or "pytest" in cmd:
            return st
    return None


def kill_process(pid: int, expected_cmdline: str = "", grace_s: float = 2.0) -> bool:
    """End one process by pid (TERM, then KILL); only if its command line is still the recorded one."""
    current = _cmdline(pid)
    if current is None:
        return False
    if expected_cmdline and current != expected_cmdline:
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.time() + grace_s
        while time.time() < deadline:
            if _cmdline(pid) is None:
                return True
            try:  # reap it if it is our child
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
    return _cmdline(pid) is None


def remove(st: Dict) -> List[str]:
    """Remove everything a (dead) run recorded. Returns a description of what was removed."""
    removed = []
    for proc in reversed(st.get("processes", [])):
        if kill_process(proc["pid"], proc.get("cmdline", "")):
            removed.append(f"process {proc['pid']} ({proc['role']})")
    for br in st.get("bridges", []):
        r = subprocess.run(["ovs-vsctl", "--timeout=5", "--if-exists", "del-br", br], capture_output=True)
        if r.returncode == 0:
            removed.append(f"bridge {br}")
    for intf in st.get("interfaces", []):
        if os.path.exists(f"/sys/class/net/{intf}"):
            subprocess.run(["ip", "link", "del", intf], capture_output=True)
            removed.append(f"interface {intf}")
    for path in st.get("files", []):
        try:
            os.unlink(path)
            removed.append(f"file {path}")
        except OSError:
            pass
    if st.get("dgram_qlen_restore"):
        try:
            with open("/proc/sys/net/unix/max_dgram_qlen", "w") as f:
                f.write(st["dgram_qlen_restore"])
            removed.append("net.unix.max_dgram_qlen restored")
        except OSError:
            pass
    try:
        os.unlink(STATE_FILE)
    except FileNotFoundError:
        pass
    return removed


def leftovers(st: Dict) -> List[str]:
    """What of a recorded run still exists (used by tests and by the runner's final check)."""
    left = []
    for proc in st.get("processes", []):
        cmd = _cmdline(proc["pid"])
        if cmd is not None and cmd == proc.get("cmdline"):
            left.append(f"process {proc['pid']} ({proc['role']})")
    out = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True, text=True).stdout.split()
    left += [f"bridge {b}" for b in st.get("bridges", []) if b in out]
    left += [f"interface {i}" for i in st.get("interfaces", []) if os.path.exists(f"/sys/class/net/{i}")]
    left += [f"file {p}" for p in st.get("files", []) if os.path.exists(p)]
    return left
