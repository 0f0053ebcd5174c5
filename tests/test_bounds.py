"""cli/bounds.py (scripts/bounds.py) without root: every job alone keeps its hosts, its buckets and the full
scenario's time scale, and the lone runs give a bound (fluid engine)."""
import json
import os
import subprocess
import sys

from cli import bounds
from workloads.scenario import scenario_from_dict

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEADLINE = os.path.join(PROJECT_DIR, "workloads", "scenarios", "headline.yaml")


def test_each_job_alone_keeps_its_hosts_buckets_and_the_full_time_scale():
    plan, alone = bounds.alone_scenarios(HEADLINE, ["--host-rate", "5", "--fabric-rate", "5"])
    full = plan.scenario
    assert set(alone) == {j.name for j in plan.jobs}
    hosts = [(f"h{k}", f"10.0.0.{k}", (k - 1) // 4) for k in range(1, 17)]
    for job in plan.jobs:
        data = alone[job.name]
        assert data["time_scale"] == full.scaling.time_scale and data["jobs"][0]["hosts"] == list(job.hosts)
        (again,) = scenario_from_dict(data).resolve(hosts, 5.0).jobs
        assert again.model.buckets == job.model.buckets and again.hosts == job.hosts


def test_the_fluid_bound_of_a_job_alone_is_at_least_what_it_gets_shared(tmp_path):
    default = os.path.join(PROJECT_DIR, "workloads", "scenarios", "default.yaml")
    out = subprocess.run([sys.executable, os.path.join(PROJECT_DIR, "scripts", "bounds.py"), "--scenario", default],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    shared = subprocess.run([sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py"), "--engine", "fluid",
                             "--scheduler", "crux", "--scenario", default, "-q", "--out", str(tmp_path / "shared")],
                            capture_output=True, text=True, timeout=300)
    assert shared.returncode == 0, shared.stderr
    summary = json.loads((tmp_path / "shared" / "summary.json").read_text())
    for job in summary["jobs"]:
        assert result["jobs"][job["name"]]["u_bound"] >= job["gpu_utilization"] - 0.01, job["name"]
    assert summary["cluster"]["gpu_utilization"] <= result["cluster_u_bound"] + 0.01 <= 1.01
