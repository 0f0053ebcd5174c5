"""scripts/sweep.py --cluster without root (fluid runs): a sweep sent to a local Dask cluster gives the same
summary.csv as the same sweep run locally; an interrupted distributed sweep resumes with nothing lost or run
twice; a worker killed mid-sweep loses no run; bad addresses are refused before anything starts."""
import csv
import os
import signal
import subprocess
import sys
import time

import pytest

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = [sys.executable, os.path.join(PROJECT_DIR, "scripts", "sweep.py")]
DEFAULT = os.path.join(PROJECT_DIR, "workloads", "scenarios", "default.yaml")
# 4 schedulers x 2 seeds = 8 twin runs of a few seconds each.
GRID = ["--schedulers", "ecmp,bytescheduler,crux,flux", "--seeds", "1,2", "--scenarios", DEFAULT,
        "--extra-args=--engine fluid --iterations 3"]
# The same grid with runs of about 2 s each (100 iterations): the interrupted sweep must still have runs to do
# when its first run comes back (with 3 iterations all eight can finish within one polling interval).
SLOW_GRID = GRID[:-1] + ["--extra-args=--engine fluid --iterations 100"]


def rows(path):
    with open(path, newline="") as f:
        return sorted((tuple(sorted(r.items())) for r in csv.DictReader(f)))


def run_ids(sweep_dir):
    return sorted(d for d in os.listdir(sweep_dir) if not d.startswith(".") and os.path.isdir(sweep_dir / d))


def test_a_cluster_sweep_gives_the_same_summary_as_a_local_one(tmp_path):
    local = subprocess.run(SWEEP + GRID + ["--out", str(tmp_path / "local")], capture_output=True, text=True,
                           timeout=600)
    assert local.returncode == 0, local.stderr[-2000:]
    remote = subprocess.run(SWEEP + GRID + ["--out", str(tmp_path / "cluster"), "--cluster", "local:2"],
                            capture_output=True, text=True, timeout=600)
    assert remote.returncode == 0, remote.stderr[-2000:]
    assert rows(tmp_path / "local" / "summary.csv") == rows(tmp_path / "cluster" / "summary.csv")
    assert len(run_ids(tmp_path / "cluster")) == 8
    assert not (tmp_path / "cluster" / ".incoming").exists()
    # Every run folder came back whole, with the runner's log.
    for run_id in run_ids(tmp_path / "cluster"):
        assert (tmp_path / "cluster" / run_id / "summary.json").exists()
        assert (tmp_path / "cluster" / run_id / "sweep-runner.log").exists()


def test_an_interrupted_cluster_sweep_resumes_with_nothing_lost_or_duplicated(tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(SWEEP + SLOW_GRID + ["--out", str(out), "--cluster", "local:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:  # interrupt once at least one run is back and before all are
        done = [d for d in (run_ids(out) if out.exists() else []) if (out / d / "summary.json").exists()]
        if done:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    first = {d for d in run_ids(out) if (out / d / "summary.json").exists()}
    assert 1 <= len(first) < 8
    mtimes = {d: (out / d / "summary.json").stat().st_mtime_ns for d in first}
    again = subprocess.run(SWEEP + SLOW_GRID + ["--out", str(out), "--cluster", "local:2"], capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(run_ids(out)) == 8
    assert all((out / d / "summary.json").stat().st_mtime_ns == t for d, t in mtimes.items())  # not redone
    cluster_rows = [r for r in csv.DictReader(open(out / "summary.csv")) if r["job"] == "__cluster__"]
    assert sorted(r["run_id"] for r in cluster_rows) == run_ids(out)  # each run once
    assert all(r["ok"] == "True" for r in cluster_rows)


def test_a_worker_killed_mid_sweep_loses_no_run(tmp_path):
    """A real scheduler and two real worker processes; one worker is killed while runs are under way."""
    bin_dir = os.path.dirname(sys.executable)
    (tmp_path / "workers").mkdir()
    # A killed worker's unfinished run leaves its temporary folder behind: keep it under tmp_path.
    env = dict(os.environ, PYTHONPATH=PROJECT_DIR, TMPDIR=str(tmp_path / "workers"))
    port = 18786
    procs = [subprocess.Popen([os.path.join(bin_dir, "dask"), "scheduler", "--port", str(port),
                               "--dashboard-address", ":0", "--host", "127.0.0.1"],
                              cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(3)
        for _ in range(2):
            procs.append(subprocess.Popen([os.path.join(bin_dir, "dask"), "worker", f"tcp://127.0.0.1:{port}",
                                           "--nthreads", "1", "--no-nanny"], cwd=PROJECT_DIR, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        time.sleep(4)
        out = tmp_path / "sweep"
        sweep = subprocess.Popen(SWEEP + SLOW_GRID + ["--out", str(out), "--cluster", f"tcp://127.0.0.1:{port}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and not (out.exists() and run_ids(out)):
            time.sleep(0.2)
        os.killpg(procs[1].pid, signal.SIGKILL)  # one machine is lost with its run; the task goes to the other
        _, err = sweep.communicate(timeout=600)
        assert sweep.returncode == 0, err[-2000:]
        assert len(run_ids(out)) == 8
        cluster_rows = [r for r in csv.DictReader(open(out / "summary.csv")) if r["job"] == "__cluster__"]
        assert len(cluster_rows) == 8 and all(r["ok"] == "True" for r in cluster_rows)
    finally:
        for p in procs:
            try:
                if p is procs[0]:
                    p.kill()
                else:
                    os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


@pytest.mark.parametrize("address", ["local:0", "nowhere", "local:x"])
def test_bad_cluster_addresses_are_refused_before_anything_starts(tmp_path, address):
    r = subprocess.run(SWEEP + GRID + ["--out", str(tmp_path / "x"), "--cluster", address], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--cluster" in r.stderr
    assert not (tmp_path / "x").exists()
