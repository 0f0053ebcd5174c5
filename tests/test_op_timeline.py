"""research/op_timeline.py: an emulation run's operations beside the twin's replay of the same run."""
import json
import math
import os

import pytest

import twin
from core.fabric import FabricSpec
from analysis.timeline import twin_ops
from research import op_timeline


def test_op_time_skew_spread_and_delivery_by_hand():
    # rank -> (launch, last byte, done); rank r receives from r - 1.
    ranks = {0: (10.0, 10.4, 10.5), 1: (10.2, 10.45, 12.0), 2: (10.1, 10.5, 10.6)}
    assert op_timeline.op_time(ranks) == pytest.approx(2.0)
    assert op_timeline.skew(ranks) == pytest.approx(0.2)
    assert op_timeline.after_launch(ranks) == pytest.approx(1.8)
    assert op_timeline.spread(ranks) == pytest.approx(1.5)
    # Rank 1 had its predecessor's (rank 0's) last message 1.6 s after it went to the kernel.
    assert op_timeline.delivery(ranks) == pytest.approx(1.6)
    twin_ops = {("j", 0, 0): {r: (t[0], math.nan, 11.0) for r, t in ranks.items()}}
    row = op_timeline.compare({("j", 0, 0): ranks}, twin_ops, late_s=1.0)[0]
    assert row["late"] and row["emulation_s"] - row["twin_s"] == pytest.approx(1.0)
    assert row["twin_spread_s"] == 0 and row["twin_after_launch_s"] == pytest.approx(0.8)
    assert op_timeline.compare({("j", 0, 0): ranks}, twin_ops, late_s=2.0)[0]["late"] is False
    # Per job: each iteration's largest skew, once.
    rows = [dict(row, iteration=k, bucket=b, skew_s=0.1 * (k + b), twin_skew_s=0.0) for k in (0, 1) for b in (0, 1)]
    job = op_timeline.summarise(rows, {"j": 0.5}, {"j": 0.6})[0]
    assert job["skew_s"] == {"emulation": pytest.approx(0.1 + 0.2), "twin": 0.0}
    assert job["late_operations"] == 4 and job["after_launch_excess_s"] == pytest.approx(4.0)


@pytest.fixture
def recorded(tmp_path):
    """A twin run's folder dressed as an emulation run: its workers' logs written from the twin's own trace, so
    that the two engines agree exactly until a test changes the logs."""
    run = tmp_path / "run"
    plan = twin.prepare("smoke", FabricSpec(2, 4, 4, 10.0, 10.0), scheduler="crux", quiet=True).named(out=str(run))
    assert twin.run_fluid(plan) == 0
    summary = json.load(open(run / "summary.json"))
    summary["config"]["engine"] = "emulation"
    json.dump(summary, open(run / "summary.json", "w"))
    ops, _ = twin_ops(summary["config"])
    os.makedirs(run / "workers")
    ranks = sorted({(job, r) for (job, _i, _b), by_rank in ops.items() for r in by_rank})
    for job, rank in ranks:
        with open(run / "workers" / f"{job}-r{rank}.jsonl", "w") as f:
            f.write(json.dumps({"type": "header", "job": job, "rank": rank}) + "\n")
            for (name, iteration, bucket), by_rank in sorted(ops.items()):
                if name == job:
                    launch, _, done = by_rank[rank]
                    f.write(json.dumps({"type": "op", "iteration": iteration, "bucket": bucket, "launch": launch,
                                        "last_byte": done - 0.01, "done": done}) + "\n")
    return run, ops


def test_a_run_the_twin_made_agrees_with_its_replay_and_a_late_rank_is_a_stall(recorded, tmp_path):
    run, ops = recorded
    out = tmp_path / "timeline.json"
    assert op_timeline.main([str(run), "--out", str(out)]) == 0
    result = json.load(open(out))
    assert len(result["operations"]) == len(ops) > 0
    for row in result["operations"]:
        assert row["emulation_s"] == pytest.approx(row["twin_s"]) and not row["late"]
    assert all(j["late_operations"] == 0 and j["after_launch_excess_s"] == pytest.approx(0.0)
               for j in result["jobs"])
    # One rank of one operation done 2 s late: one late operation, 2 s longer than the twin.
    log = run / "workers" / sorted(os.listdir(run / "workers"))[0]
    lines = [json.loads(x) for x in open(log)]
    lines[1]["done"] += 2.0
    with open(log, "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    assert op_timeline.main([str(run), "--out", str(out)]) == 0
    job = json.load(open(out))["jobs"][0]
    assert job["late_operations"] == 1 and job["after_launch_excess_s"] == pytest.approx(2.0, abs=1e-6)


def test_bad_input_is_one_line_and_exit_2(recorded, tmp_path, capsys):
    run, _ = recorded
    assert op_timeline.main([str(tmp_path / "nowhere")]) == 2
    assert op_timeline.main([str(run), "--late", "0"]) == 2
    assert op_timeline.main([str(run), "--job", "no-such-job"]) == 2
    summary = json.load(open(run / "summary.json"))
    summary["config"]["engine"] = "fluid"
    json.dump(summary, open(run / "summary.json", "w"))
    assert op_timeline.main([str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("op_timeline.py: ") for line in err)
