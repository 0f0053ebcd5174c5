"""Faults in real runs (root): a leaf-spine link down and up again and a spine switch down mid-run, under every
scheduler, and controllers killed mid-run. Every job must complete with correct sums, the controller must reroute
within a second, and a killed controller must come back with the gap recorded: never a silent 'OK'."""
import json
import subprocess

import pytest

from tests.test_runner_root import RUN, SMOKE, assert_clean

pytestmark = pytest.mark.root

# Two spines, two leaves, two hosts per leaf: the smoke job's two workers sit on different leaves, so its ring
# crosses a spine in both directions.
SMALL = ["--spines", "2", "--leaves", "2", "--hosts-per-leaf", "2", "--scenario", SMOKE, "--skip-checks"]


def run(tmp_path, *args):
    out = tmp_path / "run"
    r = subprocess.run(RUN + SMALL + list(args) + ["--out", str(out), "-q"], capture_output=True, text=True,
                       timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    return r, summary


def assert_jobs_completed_correctly(summary):
    for job in summary["jobs"]:
        assert job["iterations"] == 10 and job["check_failures"] == 0, job


def fault_record(summary, text):
    return next(f for f in summary["faults"] if f["fault"] == text)


@pytest.mark.parametrize("scheduler", ["ecmp", "bytescheduler", "crux", "flux"])
def test_a_link_down_and_up_mid_run_is_rerouted_within_a_second(tmp_path, scheduler):
    r, summary = run(tmp_path, "--scheduler", scheduler, "--iterations", "10",
                     "--fault", "link lf1-sp1 down at 2", "--fault", "link lf1-sp1 up at 6")
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary["ok"]
    assert_jobs_completed_correctly(summary)
    down, up = fault_record(summary, "link lf1-sp1 down at 2"), fault_record(summary, "link lf1-sp1 up at 6")
    assert sorted(down["interfaces"]) == ["lf1-eth3", "sp1-eth1"]
    changes = summary["controller"]["fabric_changes"]
    (cut,) = [c for c in changes if c["links_down"] == ["lf1-sp1"]]
    (back,) = [c for c in changes if c["links_down"] == []]
    # From the fault to the last switch's confirmation of the new rules.
    assert cut["time"] + cut["latency_s"] - down["applied_at"] < 1.0, (cut, down)
    assert back["time"] + back["latency_s"] - up["applied_at"] < 1.0, (back, up)
    assert "rerouted: links down lf1-sp1" in r.stdout
    assert_clean()


def test_a_spine_down_mid_run_moves_everything_to_the_other_spine(tmp_path):
    r, summary = run(tmp_path, "--scheduler", "crux", "--iterations", "10", "--fault", "switch sp1 down at 2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert_jobs_completed_correctly(summary)
    assert sorted(fault_record(summary, "switch sp1 down at 2")["interfaces"]) == \
        ["lf1-eth3", "lf2-eth3", "sp1-eth1", "sp1-eth2"]
    assert any(c["links_down"] == ["lf1-sp1", "lf2-sp1"] for c in summary["controller"]["fabric_changes"])
    assert_clean()


@pytest.mark.parametrize("role", ["scheduler", "monitor"])
def test_a_killed_controller_is_restarted_and_the_gap_recorded(tmp_path, role):
    r, summary = run(tmp_path, "--scheduler", "flux", "--iterations", "10",
                     "--fault", f"controller {role} kill at 2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary["ok"] and summary["fidelity"]["faithful"]
    assert_jobs_completed_correctly(summary)
    killed = fault_record(summary, f"controller {role} kill at 2")
    (restart,) = summary["controller"]["restarts"]
    assert restart["role"] == role and f"the {role} controller exited" in restart["reason"]
    assert restart["detected_at"] - killed["applied_at"] < 1.0          # noticed within a second
    assert restart["recovered_at"] - killed["applied_at"] < 10.0
    assert f"controller restarted: the {role} controller exited" in r.stdout
    # The switches kept their rules and counters: the reconstruction still reads every flow's counter.
    assert summary["jobs"][0]["gpu_utilization_reconstructed"] is not None, summary["reconstruction"]["jobs"]
    stats = "controller_stats" if role == "scheduler" else "monitor_stats"
    assert (tmp_path / "run" / f"{stats}.0.json").exists()               # the dead process's own figures
    assert_clean()
