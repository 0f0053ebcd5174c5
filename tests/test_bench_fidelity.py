"""bench/fidelity.py without root: the twin's runs at a rate beside an earlier JSON of the benchmark (the
emulation's seeds), and bad input refused before anything runs."""
import json
import os
import subprocess
import sys

import pytest

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = [sys.executable, os.path.join(PROJECT_DIR, "bench", "fidelity.py")]


def reference_run(seed, cluster, jobs, timeouts):
    return {"transport": "tcp", "rate_mbps": 5.0, "scheduler": "crux", "seed": seed, "cluster": cluster,
            "jobs": jobs, "timeouts": timeouts, "faithful": seed != 2}


def test_the_twin_at_a_rate_beside_the_emulations_seeds(tmp_path):
    jobs = ("resnet50", "vgg16", "bert_large", "gpt2_xl")
    reference = {"runs": [reference_run(1, 0.80, dict.fromkeys(jobs, 0.80), 10),
                          reference_run(2, 0.84, dict.fromkeys(jobs, 0.84), 30),
                          # Another rate and scheduler: not compared.
                          dict(reference_run(1, 0.1, dict.fromkeys(jobs, 0.1), 0), rate_mbps=2.5),
                          dict(reference_run(1, 0.1, dict.fromkeys(jobs, 0.1), 0), scheduler="ecmp")]}
    (tmp_path / "emulation.json").write_text(json.dumps(reference))
    md = tmp_path / "table.md"
    r = subprocess.run(BENCH + ["--engine", "fluid", "--rates", "5", "--seeds", "1", "--transports", "tcp",
                                "--schedulers", "crux", "--against", str(tmp_path / "emulation.json"),
                                "--md", str(md)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["engine"] == "fluid" and "capacity_mbps" not in out
    (run,) = out["runs"]
    assert run["engine"] == "fluid" and set(run["jobs"]) == set(jobs) and 0 < run["cluster"] < 1
    (row,) = out["comparison"]
    assert row["reference_cluster"] == pytest.approx(0.82) and row["reference_range"] == [0.80, 0.84]
    assert row["cluster_diff"] == pytest.approx(run["cluster"] - 0.82)
    assert row["job_diff"]["vgg16"] == pytest.approx(run["jobs"]["vgg16"] - 0.82)
    assert abs(row["job_diff"][row["worst_job"]]) == max(abs(d) for d in row["job_diff"].values())
    assert row["reference_timeouts"] == 20 and row["reference_faithful"] == 1 and row["reference_seeds"] == 2
    table = md.read_text()
    assert "| tcp | 5 | crux |" in table and f"{row['cluster_diff']:+.3f}" in table and "1/2" in table


@pytest.mark.parametrize("bad", [["--md", "x.md"], ["--against", "missing.json"], ["--rates", "fast"],
                                 ["--scenario", "nope"]])
def test_bad_input_is_refused_in_one_line(tmp_path, bad):
    r = subprocess.run(BENCH + ["--engine", "fluid", *bad], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == "" and not (tmp_path / "x.md").exists()


def test_the_verdict_table_counts_the_flagged_runs_per_rate(tmp_path):
    runs = [dict(reference_run(seed, 0.8, {}, 0), emulator_wait_frames=0.1 * seed, ovs_cpu_peak=0.95)
            for seed in (1, 2, 3)]
    (tmp_path / "out.json").write_text(json.dumps({"runs": runs}))
    r = subprocess.run(BENCH + ["--verdict-table", str(tmp_path / "out.json")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "| out.json | 5 | 1 of 3 |" in r.stdout              # seed 2 is the unfaithful one
    assert "| out.json | 5 | crux | 2 | 0.800 | 0.20 | 0.95 | False |" in r.stdout
    bad = subprocess.run(BENCH + ["--verdict-table", str(tmp_path / "none.json")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_rate_table_gives_each_rate_its_change_from_the_lowest_and_the_job_that_moved_most(tmp_path):
    def run(rate, seed, cluster, bert, timeouts):
        return dict(reference_run(seed, cluster, {"resnet50": cluster, "bert_large": bert}, timeouts),
                    rate_mbps=rate, ovs_cpu_peak=0.4 + rate / 10, wall_s=100 / rate)
    first = [run(2.5, 1, 0.80, 0.70, 10), run(2.5, 3, 0.82, 0.72, 20)]
    second = [run(5.0, 1, 0.79, 0.60, 4), run(5.0, 2, 0.81, 0.64, 0)]
    for name, runs in (("a.json", first), ("b.json", second)):
        (tmp_path / name).write_text(json.dumps({"runs": runs}))
    r = subprocess.run(BENCH + ["--rate-table", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "| 2.5 | 0.810 [0.800, 0.820]; 15 RTOs; 2/2 faithful | 0.65 | 40 |" in r.stdout
    # From 2.5 to 5: the cluster's mean -0.010, BERT-large's -0.090 (ResNet-50's -0.010); seed 2 is unfaithful.
    assert "| 5 | 0.800 [0.790, 0.810] (-0.010; bert_large -0.090); 2 RTOs; 1/2 faithful | 0.90 | 20 |" in r.stdout
