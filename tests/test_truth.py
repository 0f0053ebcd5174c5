"""Job and cluster summaries from hand-written worker logs with known answers."""
import json

import pytest

from workloads.truth import cluster_utilization, read_log, summarize_job


def compute(it, phase, bucket, start, end):
    return {"type": "compute", "iteration": it, "phase": phase, "bucket": bucket, "start": start, "end": end}


def op(it, bucket, launch, done, ok=True, sent=100):
    return {"type": "op", "iteration": it, "bucket": bucket, "nbytes": 150, "launch": launch, "first_byte": launch,
            "last_byte": done, "done": done, "bytes_sent": sent, "payload_sent": sent - 16, "ok": ok}


def header(rank):
    return {"type": "header", "version": 1, "job": "j", "job_index": 0, "rank": rank, "workers": 2,
            "model": "m", "semantics": "overlap", "iterations": 2, "pid": 1, "host": "h", "address": "127.0.1.1"}


def write(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return str(path)


@pytest.fixture
def logs(tmp_path):
    # Rank 0: busy 2.0 s of 3.0 s; 0.5 s waiting on an op, 0.5 s idle without a named wait.
    rank0 = [
        header(0),
        compute(0, "forward", 0, 0.0, 0.5), compute(0, "backward", 0, 0.5, 1.0), op(0, 0, 0.5, 1.5),
        {"type": "iteration", "iteration": 0, "start": 0.0, "end": 1.0},
        {"type": "wait", "iteration": 0, "bucket": 0, "in_iteration": 1, "start": 1.0, "end": 1.5},
        compute(1, "forward", 0, 1.5, 2.0), compute(1, "backward", 0, 2.0, 2.5), op(1, 0, 2.5, 3.0),
        {"type": "iteration", "iteration": 1, "start": 1.0, "end": 3.0},
        {"type": "summary", "iterations": 2, "events_sent": 9, "events_dropped": 2},
    ]
    # Rank 1: busy 2.4 s of 3.0 s; a compute record reaching past the span is clipped; its log was cut short.
    rank1 = [
        header(1),
        compute(0, "forward", 0, 0.0, 0.6), compute(0, "backward", 0, 0.6, 1.2), op(0, 0, 0.6, 1.4, ok=False),
        {"type": "iteration", "iteration": 0, "start": 0.0, "end": 1.2},
        compute(1, "forward", 0, 1.2, 1.8), compute(1, "backward", 0, 1.8, 2.4), op(1, 0, 2.4, 2.9),
        compute(2, "forward", 0, 3.0, 3.5),
        {"type": "iteration", "iteration": 1, "start": 1.2, "end": 3.0},
    ]
    return [write(tmp_path / "r0.jsonl", rank0), write(tmp_path / "r1.jsonl", rank1, tail='{"type": "comp')]


def test_job_summary(logs):
    s = summarize_job(logs)
    assert s["job"] == "j" and s["workers"] == 2 and s["ranks_logged"] == 2
    assert not s["complete"]  # rank 1 has no summary line
    assert s["events_sent"] == 9 and s["events_dropped"] == 2  # from the ranks that wrote their summary
    assert s["iterations"] == 2
    # Iteration time = max over ranks: it0 max(1.0, 1.2), it1 max(2.0, 1.8).
    assert s["iteration_times_s"] == pytest.approx([1.2, 2.0])
    assert s["iteration_time_mean_s"] == pytest.approx(1.6)
    assert s["iteration_time_p50_s"] == pytest.approx(1.6)
    assert s["iteration_time_p99_s"] == pytest.approx(1.2 + 0.99 * 0.8)
    assert s["iteration_time_rank_mean_s"] == pytest.approx(1.5)
    assert s["gpu_utilization"] == pytest.approx((2.0 / 3.0 + 2.4 / 3.0) / 2)
    assert s["busy_s"] == pytest.approx(2.2) and s["gpu_busy_seconds"] == pytest.approx(4.4)
    assert s["idle_s"] == pytest.approx(0.8) and s["wait_s"] == pytest.approx(0.25)
    assert s["start"] == 0.0 and s["end"] == 3.0
    # Operation time: first launch to last done over ranks.
    assert [o["duration_s"] for o in s["ops"]] == pytest.approx([1.0, 0.6])
    assert s["op_time_mean_s"] == pytest.approx(0.8)
    assert s["op_time_by_bucket_s"] == {0: pytest.approx(0.8)}
    assert s["check_failures"] == 1
    assert s["bytes_sent"] == 400
    ranks = {r["rank"]: r for r in s["per_rank"]}
    assert ranks[0]["idle_s"] == pytest.approx(1.0) and ranks[0]["wait_s"] == pytest.approx(0.5)
    assert ranks[1]["busy_s"] == pytest.approx(2.4)


def test_warmup_skips_first_iterations(logs):
    s = summarize_job(logs, warmup=1)
    assert s["iteration_times_s"] == pytest.approx([2.0])
    assert s["iteration_time_p99_s"] == pytest.approx(2.0)
    # Utilisation still covers the whole run.
    assert s["gpu_utilization"] == pytest.approx(summarize_job(logs)["gpu_utilization"])


def test_truncated_line_is_counted(logs):
    assert read_log(logs[1]).bad_lines == 1
    assert read_log(logs[0]).bad_lines == 0


def test_cluster_utilization_weights_by_gpus():
    jobs = [{"gpu_utilization": 0.5, "workers": 2}, {"gpu_utilization": 1.0, "workers": 6}]
    assert cluster_utilization(jobs) == pytest.approx(0.875)
    assert cluster_utilization(jobs[:1]) == pytest.approx(0.5)
