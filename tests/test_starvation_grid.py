"""research/starvation_grid.py: the twin's starvation terms on a grid, judged against the emulation's suite."""
import json
import os

import pytest

from research import starvation_grid
from experiment.results import CLUSTER
from tests.test_seeds_table import write_runs

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_grid_is_every_combination_of_the_model_terms_given():
    grid = starvation_grid.parse_grid(["rto_backoff=1,0", "starve_share=0.02, 0.005"])
    names = [starvation_grid.setting_name(s) for s in starvation_grid.settings(grid)]
    assert names == ["rto_backoff-1__starve_share-0.02", "rto_backoff-1__starve_share-0.005",
                     "rto_backoff-0__starve_share-0.02", "rto_backoff-0__starve_share-0.005"]
    for bad, why in (("nosuchterm=1", "not a twin model term"), ("rto_backoff", "expected TERM=V1,V2"),
                     ("rto_backoff=", "expected TERM=V1,V2"), ("rto_backoff=,", "expected TERM=V1,V2"),
                     ("rto_backoff=fast", "numbers")):
        with pytest.raises(starvation_grid.BadInput, match=why):
            starvation_grid.parse_grid([bad])


def test_a_setting_is_scored_by_the_bands_against_the_emulations_mean(tmp_path):
    emulation, out = str(tmp_path / "emulation"), str(tmp_path / "grid")
    write_runs(emulation, {"r1": ("True", "True", {"j1": 0.80, "j2": 0.60, CLUSTER: 0.70}),
                           "r2": ("True", "True", {"j1": 0.70, "j2": 0.60, CLUSTER: 0.65})})
    write_runs(emulation, {"r1": ("True", "True", {"j1": 0.60, CLUSTER: 0.60}),
                           "r2": ("True", "True", {"j1": 0.60, CLUSTER: 0.60})}, variant="flux")
    setting = (("rto_backoff", "0"),)
    folder = os.path.join(out, starvation_grid.setting_name(setting))
    # Against the means (crux: j1 0.75, j2 0.60, cluster 0.675; flux 0.60): crux inside, flux's job 0.08 off.
    write_runs(folder, {"t": ("", "True", {"j1": 0.74, "j2": 0.62, CLUSTER: 0.68})})
    write_runs(folder, {"t": ("", "True", {"j1": 0.68, CLUSTER: 0.62})}, variant="flux")
    row = starvation_grid.score(setting, out, emulation, ["crux", "flux"])
    assert (row["both_within"], row["trials"]) == (1, 2)
    assert row["setting"] == {"rto_backoff": "0"}
    [miss] = row["misses"]
    assert (miss["variant"], miss["scenario"]) == ("flux", "s")
    assert abs(miss["worst_job"] - 0.08) < 1e-9
    # Means over the variants: the cluster (0.005 + 0.02) / 2, the job furthest off (0.02 + 0.08) / 2.
    assert abs(row["mean_abs_worst_job"] - 0.05) < 1e-9
    md = starvation_grid.markdown([row], emulation, ["crux", "flux"])
    assert "| rto_backoff 0 | 1/2 | 1/1 | 0/1 | 0.013 / 0.050 | 0 | flux s +0.020/0.080 |" in md


def test_the_grid_runs_the_fluid_suite_per_setting_and_writes_its_tables(tmp_path, capsys):
    out = str(tmp_path / "grid")
    emulation = os.path.join(PROJECT_DIR, "results", "suite", "emulation")
    rc = starvation_grid.main(["--grid", "rto_backoff=1,0", "--scenarios", "wait-all", "--variants", "crux",
                               "--emulation", emulation, "--out", out])
    assert rc == 0
    result = json.load(open(os.path.join(out, "grid.json")))
    assert [r["folder"] for r in result["settings"]] and len(result["settings"]) == 2
    for row in result["settings"]:
        # Each setting's suite ran the real twin on the scenario and was judged on the emulation's three seeds.
        assert os.path.exists(os.path.join(out, row["folder"], "wait-all", "crux", "summary.csv"))
        assert row["variants"]["crux"]["trials"] == 1
    assert "| setting | within, all | crux |" in open(os.path.join(out, "grid.md")).read()
    assert starvation_grid.main(["--grid", "rto_backoff=1", "--emulation", str(tmp_path / "none"),
                                 "--out", out]) == 2
    assert "no folder" in capsys.readouterr().err
    assert starvation_grid.main(["--grid", "rto_backoff=1", "--variants", "crux,nosuch", "--out", out]) == 2
    assert "unknown nosuch" in capsys.readouterr().err
