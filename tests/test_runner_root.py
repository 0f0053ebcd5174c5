"""End-to-end runs of testbed/run.py as root: every scheduler on a multi-tenant scenario, and clean exits
(normal end, SIGTERM, and SIGKILL followed by the next run's cleanup)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from core.fabric import FABRIC_NAME
from testbed import state
from testbed.fidelity import EMULATOR_WAIT_LIMIT

pytestmark = pytest.mark.root

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]
SMOKE = os.path.join(PROJECT_DIR, "workloads", "scenarios", "smoke.yaml")
SMALL = ["--spines", "1", "--leaves", "2", "--hosts-per-leaf", "2", "--scenario", SMOKE]


def our_bridges():
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    return [b for b in out if FABRIC_NAME.fullmatch(b)]


def assert_clean(recorded=None):
    assert not os.path.exists(state.STATE_FILE)
    assert our_bridges() == []
    assert not [i for i in os.listdir("/sys/class/net") if FABRIC_NAME.fullmatch(i) and "-eth" in i]
    if recorded:
        assert state.leftovers(recorded) == []
    with open("/proc/sys/net/unix/max_dgram_qlen") as f:
        assert int(f.read()) < 4096  # restored


def wait_for_hosts(proc, timeout=60):
    """The recorded state once the runner has built the network (host shells recorded)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        st = state.load()
        if st and any(p["role"].startswith("host") for p in st["processes"]):
            time.sleep(1.0)  # let it go on into the start phase
            return state.load()
        time.sleep(0.1)
    raise AssertionError("the runner did not build the network in time")


@pytest.mark.parametrize("scheduler, topology", [
    (scheduler, topology) if (scheduler, topology) != ("flux", "leafspine")
    else pytest.param(scheduler, topology, marks=pytest.mark.every_python)
    for topology in ("leafspine", "fattree") for scheduler in ("ecmp", "bytescheduler", "crux", "flux")])
def test_every_scheduler_runs_the_default_scenario(tmp_path, scheduler, topology):
    out = tmp_path / scheduler
    # At the default 10 Mbit/s the 16-host leaf-spine sits at the verdict's limit (packets wait about half a frame
    # for Open vSwitch, results/fidelity/verdict-wait-set.json), and the fat-tree's 20 switches, 80 ports that
    # its main loop polls on every wake-up, above it (docs/fidelity.md): each runs at a rate where it is faithful.
    rates = ["--host-rate", "2.5", "--fabric-rate", "2.5"] if topology == "fattree" else \
        ["--host-rate", "5", "--fabric-rate", "5"]
    r = subprocess.run(RUN + ["--scheduler", scheduler, "--topology", topology, "--iterations", "3", "--out",
                              str(out), "-q"] + rates, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] and summary["config"]["scheduler"] == scheduler
    assert summary["config"]["fabric"]["topology"] == topology
    assert summary["checks"]["reachability"]["failed"] == []
    assert summary["checks"]["priority"]["high_share"] >= 0.8
    assert len(summary["jobs"]) == 2
    for job in summary["jobs"]:
        assert 0.0 < job["gpu_utilization"] <= 1.0
        assert job["iteration_time_mean_s"] > 0
        assert job["check_failures"] == 0
        assert job["gpu_utilization_reconstructed"] is not None
    assert 0.0 < summary["cluster"]["gpu_utilization"] <= 1.0
    # The emulator's wait was read from Open vSwitch's own sockets, often enough that its error is well inside the
    # limit.
    fidelity = summary["fidelity"]
    assert fidelity["faithful"] and fidelity["emulator_wait_samples"] >= 100, fidelity
    assert fidelity["emulator_wait_frames_se"] < 0.4 * EMULATOR_WAIT_LIMIT, fidelity
    # The reconstruction from counters alone is within its own error bound of the workers' truth: a boundary is
    # off by at most a polling interval or the age of the switch's counters (Open vSwitch's revalidators, recorded
    # in the summary), plus the poll's timestamp jitter (allowed: another interval under load), and the mean
    # iteration time cancels all but the first and last boundaries (testbed/reconstruct.py).
    poll = summary["config"]["poll_interval_s"]
    assert summary["flow_counter_refresh_s"] > 0
    assert summary["reconstruction"]["flow_counter_refresh_s"] == summary["flow_counter_refresh_s"]
    for name, entry in summary["reconstruction"]["jobs"].items():
        assert abs(entry["idle_error_s"]) <= entry["iteration_time_error_bound_s"] + 2 * poll / (3 - 1), (name, entry)
    assert summary["versions"]["ryu"] == "4.34" and summary["seed"] == 1
    assert summary["controller"]["events_received"] > 0
    if scheduler != "ecmp":
        assert summary["controller"]["flowmods"] > 0
    for name in ("config.json", "port_stats.csv", "flow_stats.csv", "events.csv", "controller_stats.json"):
        assert (out / name).exists(), name
    assert "cluster GPU utilisation" in r.stdout
    assert_clean()


@pytest.mark.every_python
def test_the_same_apps_run_the_fabric_on_os_ken(tmp_path):
    # Ryu's maintained fork: the same scheduler and monitor apps, started without ryu-manager
    # (controller/framework.py). The checks confirm the rules (reachability, priority classes) and the workers finish.
    out = tmp_path / "run"
    r = subprocess.run(RUN + SMALL + ["--controller-framework", "os-ken", "--scheduler", "flux", "--iterations", "5",
                                      "--out", str(out), "-q"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["versions"]["controller_framework"] == "os-ken" and summary["versions"]["os-ken"]
    assert summary["config"]["controller_framework"] == "os-ken"
    assert summary["checks"]["reachability"]["failed"] == [] and summary["checks"]["priority"]["high_share"] >= 0.8
    assert summary["controller"]["flowmods"] > 0 and summary["controller"]["events_received"] > 0
    assert all(job["iterations"] == 5 and job["check_failures"] == 0 for job in summary["jobs"])
    assert "loading app os_ken.controller.ofp_handler" in (out / "controller.log").read_text()
    assert_clean()


class Runner:
    """A runner in the background whose output is read as it comes, to signal it in a given phase."""

    def __init__(self, args):
        self.lines = []
        self.proc = subprocess.Popen(RUN + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text, timeout=90):
        deadline = time.time() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, "".join(self.lines)
            assert time.time() < deadline, f"no {text!r} in {timeout} s:\n" + "".join(self.lines)
            time.sleep(0.05)

    def signal_and_time_exit(self, sig):
        t0 = time.time()
        self.proc.send_signal(sig)
        self.proc.wait(60)
        self.reader.join(5)
        return time.time() - t0

    @property
    def output(self):
        return "".join(self.lines)


# Each phase of a run, and how long after it starts the signal comes: the fabric being built, the checks' bulk
# traffic, the training workload.
PHASES = [("[1/4] fabric", 0.3), ("[2/4] checks", 2.0), ("[3/4] workload", 1.0)]


@pytest.mark.parametrize("phase, delay", PHASES, ids=["build", "checks", "workload"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_in_any_phase_ends_the_run_within_10_s_with_nothing_left(tmp_path, sig, phase, delay):
    before = state.snapshot(os.environ.get(state.SESSION_MARKER))
    runner = Runner(SMALL + ["--out", str(tmp_path / "run")])
    runner.wait_for(phase)
    time.sleep(delay)
    elapsed = runner.signal_and_time_exit(sig)
    assert runner.proc.returncode == 130, runner.output
    assert elapsed < 10, f"{elapsed:.1f} s to exit:\n{runner.output}"
    assert "interrupted" in runner.output and "Traceback" not in runner.output
    assert state.new_since(before, grace_s=1.0, session=os.environ.get(state.SESSION_MARKER)) == {}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ok"] is False and "interrupted" in summary["error"]


def test_next_run_cleans_up_after_sigkill(tmp_path):
    proc = subprocess.Popen(RUN + SMALL + ["--out", str(tmp_path / "killed")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    recorded = wait_for_hosts(proc)
    proc.kill()
    proc.wait(10)
    assert state.leftovers(recorded), "a SIGKILL should leave the network behind"
    r = subprocess.run(RUN + SMALL + ["--no-workload", "--skip-checks", "--out", str(tmp_path / "next")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "removed the leftovers of an earlier run" in r.stderr
    assert_clean(recorded)


def test_second_concurrent_run_is_refused(tmp_path):
    proc = subprocess.Popen(RUN + SMALL + ["--out", str(tmp_path / "first")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_hosts(proc)
        r = subprocess.run(RUN + SMALL + ["--out", str(tmp_path / "second")], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and "another run is active" in r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert_clean()


def test_a_dead_scheduler_fails_the_run_loudly(tmp_path):
    """Killed mid-workload with recovery off, the scheduler must not leave behind a run that reports 'OK' with
    figures that are not its own: the runner notices within a second, stops, and says why (summary, stderr, exit
    code 1). (With recovery on, the default, tests/test_faults_root.py checks the restart.)"""
    runner = Runner(SMALL + ["--controller-recovery", "fail", "--out", str(tmp_path / "run")])
    runner.wait_for("[3/4] workload")
    time.sleep(1.0)
    scheduler = next(p for p in state.load()["processes"] if p["role"] == "controller (scheduler)")
    killed_at = time.time()
    os.kill(scheduler["pid"], signal.SIGKILL)
    runner.proc.wait(60)
    runner.reader.join(5)
    assert runner.proc.returncode == 1, runner.output
    assert "the scheduler controller exited" in runner.output and "FAILED" in runner.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ok"] is False and "the scheduler controller exited" in summary["error"]
    assert summary["workload_wall_s"] < killed_at - summary["started_at"] + 10  # stopped, not run to its end
    assert_clean()
