"""research/ecmp_paths.py: which links Open vSwitch's hash gives each flow, against what the switches counted."""
import json
import os

import pytest

from research import ecmp_paths

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAME_MODEL = os.path.join(PROJECT_DIR, "results", "suite", "emulation", "same-model", "ecmp")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_hash_model_predicts_the_uplink_bytes_the_switches_sent_on_same_model(seed):
    """Each leaf's split of its uplink bytes between the two spines, from the recorded run's config alone, matches
    the bytes its two uplink ports sent (the run's fidelity record) within 0.002, in each of three runs."""
    with open(os.path.join(SAME_MODEL, f"ecmp__same-model__s{seed}", "summary.json")) as f:
        summary = json.load(f)
    result = ecmp_paths.analyse(summary)
    assert len(result["uplink_split"]) == 4
    for leaf in result["uplink_split"].values():
        assert leaf["first_share_measured"] == pytest.approx(leaf["first_share_predicted"], abs=0.002)
    # The four uplinks that carry the most bytes are the ones that drop most.
    uplinks = [n for n in result["ports"] if result["ports"][n]["towards"].startswith("sp")]
    heaviest = sorted(uplinks, key=lambda n: -result["ports"][n]["bytes_predicted"])[:4]
    assert set(result["lossy_ports"]) == set(heaviest)
    # bert_d's buckets 3 and 5 have no rank on a lossy uplink; every bucket of every other job has one.
    per_bucket = {name: job["ranks_on_lossy_ports_per_bucket"] for name, job in result["jobs"].items()}
    assert per_bucket["bert_d"][3] == per_bucket["bert_d"][5] == 0
    assert all(n > 0 for name in ("bert_a", "bert_b", "bert_c") for n in per_bucket[name])


def test_a_hand_made_port_record_gives_the_drop_fraction():
    with open(os.path.join(SAME_MODEL, "ecmp__same-model__s1", "summary.json")) as f:
        summary = json.load(f)
    summary["fidelity"]["classes"]["most_drops"] = [
        {"port": "lf1-eth5", "class": 0, "bytes": 1500 * 90, "dropped": 10}]
    result = ecmp_paths.analyse(summary)
    assert result["ports"]["lf1-eth5"]["drop_fraction"] == pytest.approx(0.1)
    assert result["lossy_ports"] == ["lf1-eth5"]
    assert "first_share_measured" not in result["uplink_split"]["lf1"]     # its other uplink is not listed


def test_bad_input_is_refused_in_one_line(tmp_path, capsys):
    assert ecmp_paths.main([str(tmp_path)]) == 2
    assert "no summary.json" in capsys.readouterr().err
    (tmp_path / "summary.json").write_text(json.dumps({"config": {"scheduler": "crux"}}))
    assert ecmp_paths.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "only under ecmp" in err and len(err.strip().splitlines()) == 1
    assert ecmp_paths.main([str(tmp_path), "--lossy", "2"]) == 2
