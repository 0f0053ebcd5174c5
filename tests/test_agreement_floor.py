"""research/agreement_floor.py: the emulation against itself, judged by the twin's bands."""
import json

from analysis.agreement import agreement
from research import agreement_floor
from experiment.results import CLUSTER
from tests.test_seeds_table import write_runs


def test_leave_one_out_repeat_and_retest_counts_on_a_hand_computed_suite(tmp_path, capsys):
    emulation, twin, repeat = (str(tmp_path / n) for n in ("emulation", "fluid", "repeat"))
    write_runs(emulation, {"r1": ("True", "True", {"j1": 0.80, "j2": 0.60, CLUSTER: 0.70}),
                           "r2": ("True", "True", {"j1": 0.70, "j2": 0.60, CLUSTER: 0.65}),
                           "r3": ("True", "True", {"j1": 0.60, "j2": 0.60, CLUSTER: 0.60})})
    write_runs(emulation, {"e1": ("True", "True", {"j1": 0.50, CLUSTER: 0.50}),
                           "e2": ("True", "True", {"j1": 0.52, CLUSTER: 0.52})}, variant="ecmp")
    write_runs(twin, {"t": ("", "True", {"j1": 0.69, "j2": 0.58, CLUSTER: 0.64})})
    write_runs(twin, {"t": ("", "True", {"j1": 0.70, CLUSTER: 0.70})}, variant="ecmp")
    write_runs(repeat, {"r1": ("False", "True", {"j1": 0.72, "j2": 0.60, CLUSTER: 0.66})})
    result = agreement(emulation, twin, repeat)
    crux = result["variants"]["crux"]
    # r1 against mean(r2, r3) = (0.65, 0.60, 0.625): cluster +0.075, j1 +0.15; r2 against (0.70, 0.60, 0.65):
    # exact; r3 against (0.75, 0.60, 0.675): -0.075, -0.15.
    assert (crux["leave_one_out"]["trials"], crux["leave_one_out"]["both_within"]) == (3, 1)
    assert abs(crux["leave_one_out"]["mean_abs_worst_job"] - 0.1) < 1e-9
    # The twin against the same three means: +0.015/0.04, -0.01/0.02 inside, -0.035/0.06 outside.
    assert {k: crux["twin_leave_one_out"][k] for k in ("cluster_within", "jobs_within", "both_within")} == \
        {"cluster_within": 2, "jobs_within": 2, "both_within": 2}
    assert crux["twin"]["both_within"] == 1
    # The twin's ecmp (0.70 against 0.51) is its one miss; left out, each emulation run is 0.02 from the other,
    # the twin 0.18 and 0.20 from them.
    [miss] = result["twin_misses"]
    assert (miss["scenario"], miss["variant"]) == ("s", "ecmp")
    assert abs(miss["cluster"] - 0.19) < 1e-9 and abs(miss["worst_job"] - 0.19) < 1e-9
    assert abs(miss["twin_max_abs_cluster"] - 0.20) < 1e-9 and abs(miss["twin_max_worst_job"] - 0.20) < 1e-9
    assert abs(miss["emulation_max_abs_cluster"] - 0.02) < 1e-9
    assert abs(miss["emulation_max_worst_job"] - 0.02) < 1e-9
    # The repeated r1 is inside the bands of all seeds' mean (0.70, 0.60, 0.65) but not of its own first run.
    assert (crux["repeat"]["both_within"], crux["retest"]["both_within"]) == (1, 0)
    assert abs(crux["retest"]["mean_abs_cluster"] - 0.04) < 1e-9
    assert result["repeat_runs_unfaithful"] == {"crux": 1, "ecmp": 0}
    # The suite has crux (0.65) above ecmp (0.51); the twin has ecmp (0.70) above crux (0.64).
    assert result["discordant_pairs"] == {"twin": 1, "repeat": 0}
    [pair] = result["discordant_pair_list"]["twin"]
    assert (pair["scenario"], pair["a"], pair["b"]) == ("s", "crux", "ecmp")
    assert "repeat" not in result["variants"]["ecmp"]
    # Left out as unfaithful, the repeated run is judged nowhere.
    assert "repeat" not in agreement(emulation, twin, repeat, faithful_only=True)["variants"]["crux"]
    md = tmp_path / "a.md"
    assert agreement_floor.main(["--emulation", emulation, "--twin", twin, "--variants", "crux", "--md", str(md)]) == 0
    assert list(json.loads(capsys.readouterr().out)["variants"]) == ["crux"]
    assert "| crux | the twin against all seeds' mean | 1 | 1 | 1 | 1 | 0.010 / 0.020 |" in md.read_text()


def test_missing_folders_and_suites_without_two_runs_are_refused(tmp_path, capsys):
    assert agreement_floor.main(["--emulation", str(tmp_path / "nowhere")]) == 2
    assert "no folder" in capsys.readouterr().err
    write_runs(str(tmp_path), {"r1": ("True", "True", {"j1": 0.5, CLUSTER: 0.5})})
    assert agreement_floor.main(["--emulation", str(tmp_path)]) == 2
    assert "two completed runs" in capsys.readouterr().err
