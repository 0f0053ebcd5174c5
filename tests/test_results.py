"""The results model (experiment/results.py): summaries round-trip, old summaries still read, run folders are read
the same way by everyone, and a sweep's axes come back from the runner's flags. No root needed."""
import json

from experiment.results import SCHEMA_VERSION, JobSummary, RunFolder, RunSummary, infer_params

V1 = {"run_id": "r1", "ok": True, "config": {"scheduler": "crux", "seed": 2}, "seed": 2, "datapath": "user",
      "jobs": [{"name": "vgg", "model": "vgg16", "workers": 4, "iterations": 6, "hosts": ["h1"],
                "gpu_utilization": 0.9, "op_time_p50_s": 0.12, "iteration_times_s": [1.0, 1.1]}],
      "cluster": {"gpu_utilization": 0.9, "gpus": 4}, "workload_failed": False}


def test_a_version_1_summary_reads_and_writes_back_everything():
    summary = RunSummary.from_dict(V1)
    assert summary.schema_version == 1 and summary.engine == "emulation"
    job = summary.job("vgg")
    assert job.gpu_utilization == 0.9 and job.get("op_time_p50_s") == 0.12
    back = summary.to_dict()
    for key, value in V1.items():
        assert back[key] == value, key


def test_a_new_summary_is_versioned_and_survives_json():
    summary = RunSummary(run_id="r2", config={"engine": "emulation", "flags": {"host-rate": 5.0}}, seed=1,
                         jobs=[JobSummary("bert", model="bert_large", workers=4, iterations=3)])
    text = json.dumps(summary.to_dict())
    again = RunSummary.from_dict(json.loads(text))
    assert again == summary and again.schema_version == SCHEMA_VERSION


def test_reconstruction_is_applied_to_jobs_and_cluster():
    summary = RunSummary.from_dict(V1)
    summary.apply_reconstruction({"jobs": {"vgg": {"gpu_utilization": 0.88, "idle_per_iteration_s": 0.1}},
                                  "cluster_gpu_utilization": 0.88, "idle_mae_frac_of_iteration": 0.01})
    assert summary.job("vgg").gpu_utilization_reconstructed == 0.88
    assert summary.cluster["gpu_utilization_reconstructed"] == 0.88
    assert summary.to_dict()["reconstruction"]["idle_mae_frac_of_iteration"] == 0.01


def test_axes_come_back_from_the_runners_flags():
    config = {"scheduler": "flux", "seed": 3, "scenario": {"name": "headline"}, "scheduler_params": {"alpha": 0.3},
              "flags": {"host-rate": 5.0, "skip-checks": True}}
    params = infer_params(config, ["host-rate", "param.alpha", "skip-checks", "queue-ms"], "x")
    assert params == {"scheduler": "flux", "scenario": "headline", "seed": 3, "host-rate": "5",
                      "param.alpha": "0.3", "skip-checks": "True", "queue-ms": ""}


def test_a_run_folder_reads_counters_decisions_and_status(tmp_path):
    folder = RunFolder(str(tmp_path / "run"))
    assert folder.status() == "new"
    folder.write_config({"poll_interval_s": 0.2})
    assert folder.status() == "incomplete" and folder.poll_interval_s() == 0.2
    (tmp_path / "run" / "flow_stats.csv").write_text(
        "time,dpid,job,bucket,rank,reverse,packets,bytes\n"
        "2.0,513,0,1,0,0,2,3000\n1.0,513,0,1,0,0,1,1500\n1.0,514,0,1,0,1,1,60\n")
    (tmp_path / "run" / "decisions.csv").write_text(
        "time,job,bucket,rank,priority_class,spine\n1.5,0,1,0,7,0\n1.2,0,1,0,3,\n")
    assert folder.flow_series() == {(0, 1, 0): [(1.0, 1500), (2.0, 3000)]}  # forward direction only, sorted
    assert folder.class_timelines() == {(0, 1, 0): [(1.2, 3), (1.5, 7)]}
    folder.write_summary(RunSummary(run_id="run", ok=False, error="interrupted: SIGINT"))
    assert folder.status() == "failed" and folder.summary().error == "interrupted: SIGINT"
