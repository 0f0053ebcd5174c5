"""research/phase_overlap.py: how much jobs' communication phases overlap, from operation intervals."""
import json

from research import phase_overlap


def test_overlap_counts_the_jobs_communicating_at_each_instant():
    # Over [0, 4): a communicates in [0, 2), b in [1, 3); nobody in [3, 4).
    ops = {("a", 0, 0): {0: (0.0, float("nan"), 1.5), 1: (0.5, float("nan"), 2.0)},
           ("b", 0, 0): {0: (1.0, float("nan"), 3.0)},
           ("b", 1, 0): {0: (3.999, float("nan"), 4.0)}}
    intervals = phase_overlap.job_intervals(ops)
    assert intervals["a"] == [(0.0, 2.0)]
    result = phase_overlap.overlap(intervals, step_s=0.001)
    # a: alone in [0, 1), with b in [1, 2): 1.5 jobs on average; b: with a in [1, 2), alone in [2, 3).
    assert abs(result["concurrent_jobs"]["a"] - 1.5) < 0.01
    assert abs(result["concurrent_jobs"]["b"] - 1.5) < 0.01
    assert abs(result["communicating"]["a"] - 0.5) < 0.01
    zero, one, two = result["time_with_k_jobs"]
    assert abs(zero - 0.25) < 0.01 and abs(one - 0.5) < 0.01 and abs(two - 0.25) < 0.01


def test_bad_input_is_refused_in_one_line(tmp_path, capsys):
    assert phase_overlap.main([str(tmp_path), "--models", "nonsense"]) == 2
    assert "--models" in capsys.readouterr().err
    assert phase_overlap.main([str(tmp_path), "--step", "0"]) == 2
    assert phase_overlap.main([str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({"engine": "fluid"}))
    assert phase_overlap.main([str(tmp_path)]) == 2
    assert "give an emulation run folder" in capsys.readouterr().err
