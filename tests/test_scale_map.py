"""research/scale_map.py: the map's points, one-line errors, and its report from a map.csv."""
import csv

import pytest

from research import scale_map


def test_a_point_is_a_leaf_spine_with_the_asked_oversubscription_and_equal_rings():
    spec = scale_map.fabric(256, 2.0, 5.0)
    assert (spec.spines, spec.leaves, spec.hosts_per_leaf) == (8, 16, 16) and spec.oversubscription == 2.0
    assert scale_map.fabric(1024, 4.0, 5.0).hosts_per_leaf == 32
    data = scale_map.scenario(256, 32, "random", 3)
    assert len(data["jobs"]) == 32 and {j["workers"] for j in data["jobs"]} == {8}
    assert data["placement"] == {"policy": "random", "seed": 3}
    assert [j["model"] for j in data["jobs"][:5]] == ["resnet50", "vgg16", "bert_large", "gpt2_xl", "resnet50"]


@pytest.mark.parametrize("call, message", [
    (lambda: scale_map.fabric(100, 1.0, 5.0), "a multiple of 16"),
    (lambda: scale_map.fabric(256, 3.0, 5.0), "whole number of spines"),
    (lambda: scale_map.scenario(256, 200, "random", 1), "rings of 2 or more"),
])
def test_a_point_that_cannot_be_built_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_report_puts_each_point_against_its_bounds(tmp_path):
    rows = [dict(gpus=64, tenants=8, oversubscription=2.0, placement="random", seed=seed, scheduler=s, u=u,
                 timeouts=0, u_solo_bound=0.8, u_capacity_bound=0.7, capacity_method="finite", sim_s=1, wall_s=1,
                 git_commit="x")
            for seed in (1, 2) for s, u in (("ecmp", 0.5), ("bytescheduler", 0.55), ("crux", 0.6), ("flux", 0.63))]
    with open(tmp_path / "map.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=scale_map.COLUMNS)
        w.writeheader()
        w.writerows(rows)
    text = scale_map.report(str(tmp_path))
    line = [x for x in text.splitlines() if x.startswith("| 64 |")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[9:] == ["0.800", "0.700", "1.200", "1.050", "0.600", "1.050", "0.857"]


def test_the_predictions_are_judged_on_the_points_that_decide_them(tmp_path):
    rows = [dict(gpus=64, tenants=8, oversubscription=2.0, placement="random", seed=1, scheduler=s, u=u,
                 timeouts=0, u_solo_bound=0.8, u_capacity_bound=0.65, capacity_method="finite", sim_s=1, wall_s=1,
                 git_commit="x")
            for s, u in (("ecmp", 0.4), ("bytescheduler", 0.5), ("crux", 0.6), ("flux", 0.6))]
    with open(tmp_path / "map.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=scale_map.COLUMNS)
        w.writeheader()
        w.writerows(rows)
    text = scale_map.report(str(tmp_path))
    assert "1. **held.** Crux / ECMP above 1.3" in text                 # 1.5, and no packed point to say otherwise
    assert "2. **held.**" in text                                         # 0.15 below solo, Crux at 0.92 of it
    assert "3. **held.** Flux / Crux within 0.99-1.01: 64 GPUs/8 tenants/2:1/random 1.000" in text
    assert "5. **not measured.**" in text
