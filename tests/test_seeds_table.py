"""research/seeds_table.py: the twin against the faithful emulation runs kept in several suite folders."""
import csv
import os

import pytest

from research import seeds_table
from experiment.results import CLUSTER

FIELDS = ["run_id", "scheduler", "scenario", "seed", "job", "gpu_utilization", "faithful", "ok"]


def write_runs(top, runs, scenario="s", variant="crux"):
    folder = os.path.join(top, scenario, variant)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for run_id, (faithful, ok, jobs) in runs.items():
            for job, u in jobs.items():
                w.writerow({"run_id": run_id, "scheduler": variant, "scenario": scenario, "seed": 1, "job": job,
                            "gpu_utilization": u, "faithful": faithful, "ok": ok})


def test_seeds_from_several_folders_leave_out_unfaithful_and_failed_runs(tmp_path):
    a, b, fluid = (str(tmp_path / n) for n in ("a", "b", "fluid"))
    write_runs(a, {"r1": ("True", "True", {"j1": 0.8, "j2": 0.6, CLUSTER: 0.7}),
                   "r2": ("False", "True", {"j1": 0.1, "j2": 0.1, CLUSTER: 0.1})})       # unfaithful: left out
    write_runs(b, {"r3": ("True", "True", {"j1": 0.6, "j2": 0.6, CLUSTER: 0.6}),
                   "r4": ("True", "False", {"j1": 0.0, "j2": 0.0, CLUSTER: 0.0})})      # failed: not counted
    write_runs(fluid, {"t1": ("", "True", {"j1": 0.75, "j2": 0.5, CLUSTER: 0.625})})
    out = seeds_table.table([a, b], fluid, [("s", "crux"), ("s", "flux")]).splitlines()
    # j1: 0.7 in the emulation, 0.75 in the twin; j2: 0.6 against 0.5, the larger difference.
    assert out[2] == ("| s | crux | 2 (1) | 0.650 [0.600, 0.700] | 0.625 (-0.025) | j2 | 0.600 [0.600, 0.600] "
                      "| 0.500 (-0.100) |")
    assert out[3].startswith("| s | flux | 0 (0) | no runs")


def test_bad_pairs_are_refused(tmp_path, capsys):
    assert seeds_table.main([str(tmp_path), "--twin", str(tmp_path), "--pairs", "stress-8"]) == 2
    assert "not scenario/variant" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        seeds_table.main([str(tmp_path)])
