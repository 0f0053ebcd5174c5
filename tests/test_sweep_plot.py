"""Tests of cli/sweep.py and cli/plot.py (scripts/sweep.py, scripts/plot.py) on synthetic result folders (no root,
no Mininet).

The runner is replaced by a small script (``--runner``) that writes a summary.json like testbed/run.py does and
records its calls, so resumability, retries and signal forwarding are tested without a fabric.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from core.config import ControllerConfig
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, JobSpec, ModelProfile
from cli import plot, sweep
from experiment.results import CLUSTER, JOB_COLUMNS, RunFolder

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SCENARIO = os.path.join(PROJECT_DIR, "workloads", "scenarios", "default.yaml")

FAKE_RUNNER = textwrap.dedent('''
    """Stands in for testbed/run.py: logs its call, writes config.json and summary.json."""
    import argparse, json, os, signal, sys, time
    p = argparse.ArgumentParser()
    for flag in ("--out", "--run-id", "--scheduler", "--scenario"):
        p.add_argument(flag)
    p.add_argument("--seed", type=int)
    p.add_argument("--param", action="append", default=[])
    p.add_argument("-q", action="store_true")
    args, rest = p.parse_known_args()
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps({"id": args.run_id, "argv": sys.argv[1:]}) + "\\n")
    os.makedirs(args.out, exist_ok=True)
    if os.environ.get("FAKE_SLEEP"):
        def stop(signum, frame):
            open(os.path.join(args.out, "got-signal"), "w").write(str(signum))
            sys.exit(130)
        signal.signal(signal.SIGINT, stop)
        open(os.path.join(args.out, "started"), "w").close()
        time.sleep(float(os.environ["FAKE_SLEEP"]))
    ok = args.scheduler != os.environ.get("FAKE_FAIL")
    config = {"run_id": args.run_id, "scheduler": args.scheduler, "seed": args.seed,
              "scenario": {"name": "default"}, "scheduler_params": {}, "poll_interval_s": 0.1}
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"))
    summary = {"run_id": args.run_id, "ok": ok, "config": config,
               "jobs": [{"name": "vgg", "model": "vgg16", "workers": 4, "iterations": 6,
                         "iteration_time_mean_s": 1.1, "iteration_time_p99_s": 1.3, "gpu_utilization": 0.9,
                         "gpu_utilization_reconstructed": 0.85}],
               "cluster": {"gpu_utilization": 0.9, "gpus": 4, "gpu_utilization_reconstructed": 0.85},
               "fidelity": {"faithful": True, "warnings": []}}
    if not ok:
        summary["error"] = "synthetic failure"
    json.dump(summary, open(os.path.join(args.out, "summary.json"), "w"))
    sys.exit(0 if ok else 1)
''')


@pytest.fixture
def fake_runner(tmp_path, monkeypatch):
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUNNER)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.delenv("FAKE_FAIL", raising=False)
    monkeypatch.delenv("FAKE_SLEEP", raising=False)
    monkeypatch.setattr(sweep, "is_root", lambda: True)

    def called():
        if not calls.exists():
            return []
        return [json.loads(line)["id"] for line in calls.read_text().splitlines()]
    return f"{sys.executable} {script}", called


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------------ expansion
def test_expand_cross_product_order_and_ids(tmp_path):
    a = tmp_path / "a" / "mix.yaml"
    b = tmp_path / "b" / "mix.yaml"
    for f in (a, b):
        f.parent.mkdir()
        f.write_text("name: mix\n")
    axes = [sweep.parse_set("host-rate=10,20"), sweep.parse_set("param.alpha=0.3")]
    combos = sweep.expand(["ecmp", "flux"], [str(a), str(b)], [1, 2], axes)
    assert len(combos) == 2 * 2 * 2 * 2
    ids = [c.id for c in combos]
    assert len(set(ids)) == len(ids)
    assert all(set(i) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") for i in ids)
    # Scheduler innermost, seed outermost: every prefix of the sweep compares all schedulers.
    assert [c.scheduler for c in combos[:2]] == ["ecmp", "flux"]
    assert [c.seed for c in combos[:8]] == [1] * 8 and combos[8].seed == 2
    # Same file stem in two folders: labels are kept apart by a hash of the path.
    assert combos[0].scenario != combos[4].scenario and combos[0].scenario.startswith("mix-")
    first = combos[0]
    assert first.id == f"ecmp__{first.scenario}__s1__host-rate-10__alpha-0.3"
    assert first.params() == {"scheduler": "ecmp", "scenario": first.scenario, "seed": 1, "host-rate": "10",
                              "param.alpha": "0.3"}


def test_ids_are_filesystem_safe_and_unique():
    axes = [sweep.Axis("param.paths", ("a/b", "a:b", "a b"))]
    combos = sweep.expand(["flux"], [DEFAULT_SCENARIO], [1], axes)
    ids = [c.id for c in combos]
    assert len(set(ids)) == 3
    assert all("/" not in i and ":" not in i and " " not in i for i in ids)
    assert sweep.combo_id("flux", "default", 3, [("poll-interval", "0.5")]) == "flux__default__s3__poll-interval-0.5"
    assert len(sweep.combo_id("flux", "x" * 300, 1, [])) <= 150


def test_command_building():
    combo = sweep.expand(["flux"], [DEFAULT_SCENARIO], [7],
                         [sweep.parse_set("--host-rate=20"), sweep.parse_set("param.alpha=0.7"),
                          sweep.parse_set("skip-checks=false,true")])
    cmd = sweep.build_command(["python", "run.py"], combo[1], "/tmp/sw", ["--iterations", "3"], {"skip-checks"})
    assert cmd[:2] == ["python", "run.py"]
    assert cmd[cmd.index("--scheduler") + 1] == "flux" and cmd[cmd.index("--seed") + 1] == "7"
    assert cmd[cmd.index("--host-rate") + 1] == "20" and cmd[cmd.index("--param") + 1] == "alpha=0.7"
    assert "--skip-checks" in cmd
    assert "--skip-checks" not in sweep.build_command(["r"], combo[0], "/tmp/sw", [], {"skip-checks"})
    assert cmd[cmd.index("--out") + 1] == os.path.join("/tmp/sw", combo[1].id)
    assert cmd[cmd.index("--run-id") + 1] == combo[1].id and cmd[-1] == "-q"
    assert "--iterations" in cmd


@pytest.mark.parametrize("text", ["host-rate", "seed=1,2", "scheduler=flux", "host-rate=10,,20", "host-rate=1,1",
                                  "param.=1"])
def test_bad_axes_are_rejected(text):
    with pytest.raises(sweep.BadInput):
        sweep.parse_set(text)


def test_seeds():
    assert sweep.parse_seeds("1-3,7") == [1, 2, 3, 7]
    with pytest.raises(sweep.BadInput):
        sweep.parse_seeds("1,x")


def test_refuses_without_root_unless_dry_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep, "is_root", lambda: False)
    out = tmp_path / "sw"
    base = ["--schedulers", "ecmp,flux", "--scenarios", DEFAULT_SCENARIO, "--seeds", "1,2", "--out", str(out)]
    assert sweep.main(base) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "root" in err
    assert not out.exists()
    assert sweep.main(base + ["--dry-run"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(printed) == 4 and all("testbed/run.py" in line and "--out" in line for line in printed)
    assert not out.exists()


def test_bad_input_exits_2(tmp_path, capsys):
    out = str(tmp_path / "sw")
    assert sweep.main(["--schedulers", "nosuch", "--out", out, "--dry-run"]) == 2
    assert sweep.main(["--schedulers", "flux", "--scenarios", str(tmp_path / "missing.yaml"), "--out", out,
                       "--dry-run"]) == 2
    assert sweep.main(["--schedulers", "flux", "--set", "host-rate=fast", "--out", out, "--dry-run"]) == 2
    assert sweep.main(["--schedulers", "flux", "--extra-args", "--seed 4", "--out", out, "--dry-run"]) == 2
    for line in capsys.readouterr().err.splitlines():
        assert line.startswith("sweep.py: ")


# ------------------------------------------------------------------------------------------------ resumability
def write_run(run_dir, ok, scheduler="ecmp", seed=1, versions=None):
    os.makedirs(run_dir, exist_ok=True)
    summary = {"run_id": os.path.basename(run_dir), "ok": ok,
               "config": {"scheduler": scheduler, "seed": seed, "scenario": {"name": "default"}},
               "jobs": [], "cluster": {}, "versions": versions or {}}
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f)


def test_resume_skips_finished_and_redoes_failed(tmp_path, fake_runner):
    runner, called = fake_runner
    out = tmp_path / "sw"
    argv = ["--schedulers", "ecmp,flux", "--scenarios", DEFAULT_SCENARIO, "--seeds", "1,2", "--out", str(out),
            "--runner", runner, "--retries", "0"]
    done = "ecmp__default__s1"
    write_run(out / done, ok=True)
    write_run(out / "flux__default__s1", ok=False, scheduler="flux")
    (out / "ecmp__default__s2").mkdir()  # started, never finished
    assert sweep.main(argv) == 0
    assert sorted(called()) == ["ecmp__default__s2", "flux__default__s1", "flux__default__s2"]
    # The failed and the unfinished attempts were kept aside, not mixed into the redo.
    assert sorted(os.listdir(out / ".attempts")) == ["ecmp__default__s2.1", "flux__default__s1.1"]
    assert all(RunFolder(str(out / c)).status() == "done" for c in
               ("ecmp__default__s1", "ecmp__default__s2", "flux__default__s1", "flux__default__s2"))
    assert (out / "flux__default__s2" / sweep.RUNNER_LOG).exists()
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["axes"]["scheduler"] == ["ecmp", "flux"] and manifest["axes"]["seed"] == [1, 2]
    assert "started_at" in manifest and "--schedulers" in manifest["command"]
    assert len(manifest["combinations"]) == 4
    # A second invocation has nothing left to do.
    assert sweep.main(argv) == 0
    assert len(called()) == 3
    rows = read_csv(out / "summary.csv")
    assert {r["run_id"] for r in rows} == {"ecmp__default__s1", "ecmp__default__s2", "flux__default__s1",
                                           "flux__default__s2"}
    assert all(r["ok"] == "True" for r in rows)


def test_retries_and_failure_exit_code(tmp_path, fake_runner, monkeypatch):
    runner, called = fake_runner
    monkeypatch.setenv("FAKE_FAIL", "crux")
    out = tmp_path / "sw"
    code = sweep.main(["--schedulers", "crux,flux", "--scenarios", DEFAULT_SCENARIO, "--seeds", "1",
                       "--out", str(out), "--runner", runner, "--retries", "2", "--set", "poll-interval=0.2"])
    assert code == 1
    ids = called()
    assert ids.count("crux__default__s1__poll-interval-0.2") == 3
    assert ids.count("flux__default__s1__poll-interval-0.2") == 1
    assert len(os.listdir(out / ".attempts")) == 2  # the last failed attempt stays in place
    rows = read_csv(out / "summary.csv")
    crux = [r for r in rows if r["scheduler"] == "crux"]
    assert crux and all(r["ok"] == "False" and r["error"] == "synthetic failure" for r in crux)
    assert all(r["poll-interval"] == "0.2" for r in rows)


def test_sigint_is_forwarded_and_stops_the_sweep(tmp_path, fake_runner):
    runner, called = fake_runner
    out = tmp_path / "sw"
    wrapper = tmp_path / "sweep_as_root.py"
    # Run the sweep in its own process (signals), with the root check replaced as in the other tests.
    wrapper.write_text(f"import sys\nsys.path.insert(0, {PROJECT_DIR!r})\nfrom cli import sweep\n"
                       f"sweep.is_root = lambda: True\nsys.exit(sweep.main(sys.argv[1:]))\n")
    env = dict(os.environ, FAKE_SLEEP="30")
    proc = subprocess.Popen([sys.executable, str(wrapper), "--schedulers", "ecmp,flux", "--scenarios",
                             DEFAULT_SCENARIO, "--out", str(out), "--runner", runner],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started = out / "ecmp__default__s1" / "started"
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists(), proc.communicate(timeout=5)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 130, err
    assert (out / "ecmp__default__s1" / "got-signal").read_text() == str(int(signal.SIGINT))
    assert called() == ["ecmp__default__s1"]  # the next combination never started
    assert (out / "summary.csv").exists()


# ------------------------------------------------------------------------------------------------ collection
def test_collect_only_from_synthetic_folders(tmp_path, capsys):
    out = tmp_path / "sw"
    make_run(out / "ecmp__default__s1", "ecmp", 1)
    make_run(out / "flux__default__s1", "flux", 1)
    write_run(out / "crux__default__s1", ok=False, scheduler="crux",
              versions={"git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": True})
    (out / "flux__default__s2").mkdir()
    (out / "flux__default__s2" / "config.json").write_text(json.dumps({"scheduler": "flux", "seed": 2}))
    (out / ".attempts" / "old.1").mkdir(parents=True)
    write_run(out / ".attempts" / "old.1", ok=False)
    assert sweep.main(["--collect-only", "--out", str(out)]) == 0
    rows = read_csv(out / "summary.csv")
    assert list(rows[0])[:4] == ["run_id", "scheduler", "scenario", "seed"]
    assert list(rows[0])[4:] == JOB_COLUMNS
    assert {r["run_id"] for r in rows} == {"ecmp__default__s1", "flux__default__s1", "crux__default__s1",
                                           "flux__default__s2"}
    ecmp = {r["job"]: r for r in rows if r["run_id"] == "ecmp__default__s1"}
    assert set(ecmp) == {"vgg", "bert", CLUSTER}
    assert ecmp["vgg"]["model"] == "vgg16" and float(ecmp["vgg"]["gpu_utilization"]) == pytest.approx(0.95)
    assert ecmp["vgg"]["iteration_time_p99_s"] and ecmp["vgg"]["faithful"] == "True"
    assert float(ecmp[CLUSTER]["gpu_utilization"]) == pytest.approx(0.89)
    assert ecmp[CLUSTER]["workers"] == "4" and ecmp["vgg"]["ok"] == "True"
    unfinished = [r for r in rows if r["run_id"] == "flux__default__s2"]
    assert len(unfinished) == 1 and unfinished[0]["ok"] == "False" and "summary" in unfinished[0]["error"]
    assert [r["ok"] for r in rows if r["run_id"] == "crux__default__s1"] == ["False"]
    # Each row names the code that produced its run; a run whose summary does not say leaves it empty.
    assert [r["git_commit"] for r in rows if r["run_id"] == "crux__default__s1"] == ["0123456789ab+dirty"]
    assert all(r["git_commit"] == "" for r in rows if r["run_id"] == "ecmp__default__s1")


def test_collect_uses_manifest_axes(tmp_path, fake_runner):
    runner, _ = fake_runner
    out = tmp_path / "sw"
    assert sweep.main(["--schedulers", "flux-v1", "--scenarios", DEFAULT_SCENARIO, "--out", str(out),
                       "--runner", runner, "--set", "param.alpha=0.3,0.7"]) == 0
    os.remove(out / "summary.csv")
    assert sweep.main(["--collect-only", "--out", str(out)]) == 0
    rows = read_csv(out / "summary.csv")
    assert list(rows[0])[:5] == ["run_id", "scheduler", "scenario", "seed", "param.alpha"]
    assert sorted(r["param.alpha"] for r in rows if r["job"] == CLUSTER) == ["0.3", "0.7"]


# ------------------------------------------------------------------------------------------------ plots
T0 = 1_700_000_000.0


def make_run(run_dir, scheduler, seed, ok=True, decisions=True, workers_logs=True):
    """A small but complete run folder: 2 leaves x 2 hosts, 1 spine, jobs vgg (h1,h3) and bert (h2,h4)."""
    run_dir = str(run_dir)
    os.makedirs(os.path.join(run_dir, "workers"), exist_ok=True)
    layout = FabricLayout.from_spec(FabricSpec(spines=1, leaves=2, hosts_per_leaf=2))
    spec = vars(layout.spec)
    jobs = [JobSpec(0, "vgg", ModelProfile("vgg16", "", 0, (Bucket(0, 1000, 0.1, 0.2),)), 2, 4, hosts=("h1", "h3"),
                    addresses=("10.0.0.1", "10.0.0.3")),
            JobSpec(1, "bert", ModelProfile("bert_large", "", 0, (Bucket(0, 1000, 0.1, 0.2),)), 2, 4,
                    hosts=("h2", "h4"), addresses=("10.0.0.2", "10.0.0.4"))]
    config = {"run_id": os.path.basename(run_dir), "scheduler": scheduler, "scheduler_params": {}, "seed": seed,
              "scenario": {"name": "default"}, "fabric": spec, "poll_interval_s": 0.1}
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(run_dir, "controller.json"), "w") as f:
        f.write(ControllerConfig(layout=layout, jobs=jobs, scheduler=scheduler, out_dir=run_dir, events_socket="",
                                 control_socket="", monitor_socket="").to_json())
    slow = 1.2 if scheduler == "ecmp" else 1.0
    with open(os.path.join(run_dir, "flow_stats.csv"), "w") as f:
        f.write("time,dpid,job,bucket,rank,reverse,packets,bytes\n")
        for k in range(31):
            t = T0 + 0.1 * k
            for job in (0, 1):
                for rank in (0, 1):
                    dpid = 0x201 if rank == 0 else 0x202
                    f.write(f"{t:.6f},{dpid},{job},0,{rank},0,{k * 10},{k * 12500}\n")
                    f.write(f"{t:.6f},{dpid + (1 if rank == 0 else -1)},{job},0,{rank},1,{k},{k * 500}\n")
    with open(os.path.join(run_dir, "port_stats.csv"), "w") as f:
        f.write("time,dpid,port,rx_bytes,tx_bytes,rx_packets,tx_packets,tx_dropped\n")
        for k in range(31):
            f.write(f"{T0 + 0.1 * k:.6f},{0x201},3,{k * 1000},{k * 26000},{k},{k},0\n")
            f.write(f"{T0 + 0.1 * k:.6f},{0x202},3,{k * 1000},{k * 26000},{k},{k},0\n")
    if decisions:
        with open(os.path.join(run_dir, "decisions.csv"), "w") as f:
            f.write("time,job,bucket,rank,priority_class,spine\n")
            if scheduler != "ecmp":
                f.write(f"{T0 + 1.05:.6f},0,0,0,7,0\n{T0 + 2.0:.6f},0,0,0,0,0\n{T0 + 1.5:.6f},1,0,0,3,\n")
    summary_jobs = []
    for job in ("vgg", "bert"):
        times = [slow + 0.05 * i + 0.01 * seed for i in range(4)]
        summary_jobs.append({"name": job, "model": "vgg16" if job == "vgg" else "bert_large", "workers": 2,
                             "iterations": 4, "iteration_time_mean_s": sum(times) / 4,
                             "iteration_time_p50_s": times[2], "iteration_time_p99_s": max(times),
                             "gpu_utilization": 0.95 if job == "vgg" else 0.85,
                             "gpu_utilization_reconstructed": 0.9, "iteration_times_s": times})
        if workers_logs:
            for rank in (0, 1):
                with open(os.path.join(run_dir, "workers", f"{job}-r{rank}.jsonl"), "w") as f:
                    f.write(json.dumps({"type": "header", "job": job, "rank": rank, "workers": 2}) + "\n")
                    start = T0
                    for i, d in enumerate(times):
                        f.write(json.dumps({"type": "compute", "iteration": i, "start": start, "end": start + 0.3})
                                + "\n")
                        f.write(json.dumps({"type": "iteration", "iteration": i, "start": start,
                                            "end": start + d - 0.01 * rank}) + "\n")
                        start += d
                    f.write('{"type": "iteration", "iteration": 9, "sta')  # a killed worker's last line
    rec_jobs = {j: {"idle_per_iteration_s": 0.2 + 0.01 * seed, "true_idle_per_iteration_s": 0.18,
                    "idle_error_s": 0.02} for j in ("vgg", "bert")}
    summary = {"run_id": os.path.basename(run_dir), "ok": ok, "config": config, "jobs": summary_jobs,
               "cluster": {"gpu_utilization": 0.9 - 0.01 * seed, "gpus": 4, "gpu_utilization_reconstructed": 0.88},
               "fidelity": {"faithful": True, "warnings": []},
               "reconstruction": {"idle_mae_frac_of_iteration": 0.02, "jobs": rec_jobs,
                                  "by_poll_interval": [{"poll_interval_s": 0.1 * f,
                                                        "idle_mae_frac_of_iteration": 0.02 * f,
                                                        "idle_max_err_frac_of_iteration": 0.03 * f, "jobs": rec_jobs}
                                                       for f in (1, 2, 5, 10)]}}
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f)


FIGURES = ("gpu_utilization", "iteration_cdf", "link_classes", "reconstruction", "reconstruction_vs_poll")


def test_plot_synthetic_sweep_writes_every_figure(tmp_path):
    out = tmp_path / "sw"
    for scheduler in ("ecmp", "crux", "flux"):
        for seed in (1, 2, 3):
            make_run(out / f"{scheduler}__default__s{seed}", scheduler, seed)
    assert sweep.main(["--collect-only", "--out", str(out)]) == 0
    figs = tmp_path / "figs"
    assert plot.main([str(out), "--out", str(figs)]) == 0
    for name in FIGURES:
        for ext in ("png", "pdf"):
            path = figs / f"{name}.{ext}"
            assert path.exists() and path.stat().st_size > 1000, path
    captions = (figs / "captions.md").read_text()
    assert all(f"## {name}" in captions for name in FIGURES)
    assert "min-max over seeds" in captions and "Skipped" not in captions
    # The link figure picks a run whose scheduler changed classes (not ECMP's all-class-0 run).
    assert "in run `crux__default__s1`" in captions


def test_plot_partial_sweep_never_crashes(tmp_path, capsys):
    out = tmp_path / "sw"
    make_run(out / "flux__default__s1", "flux", 1, decisions=False, workers_logs=False)
    make_run(out / "ecmp__default__s1", "ecmp", 1, ok=False)
    (out / "crux__default__s1").mkdir()
    (out / "crux__default__s1" / "config.json").write_text("{broken")
    figs = tmp_path / "figs"
    assert plot.main([str(out), "--out", str(figs), "--format", "png"]) == 0
    printed = capsys.readouterr().out
    assert "skipped link_classes" in printed and "decisions.csv" in printed
    assert (figs / "gpu_utilization.png").exists() and not (figs / "gpu_utilization.pdf").exists()
    # No worker logs: the CDF falls back to summary.json's iteration times.
    assert (figs / "iteration_cdf.png").exists()
    assert "## Skipped" in (figs / "captions.md").read_text()


def test_plot_single_run_folder_and_summary_csv_only(tmp_path):
    run = tmp_path / "run1"
    make_run(run, "flux", 1)
    assert plot.main([str(run), "--format", "pdf"]) == 0
    assert all((run / "figures" / f"{name}.pdf").exists() for name in FIGURES)
    # Only summary.csv: the utilisation figure is drawn, the per-run figures are skipped.
    only_csv = tmp_path / "csv-only"
    only_csv.mkdir()
    (only_csv / "summary.csv").write_text(
        "run_id,scheduler,scenario,seed,host-rate,job,gpu_utilization,ok\n"
        "a,ecmp,default,1,10,__cluster__,0.7,True\nb,flux,default,1,10,__cluster__,0.8,True\n"
        "c,flux,default,1,20,__cluster__,0.9,True\n")
    assert plot.main([str(only_csv), "--out", str(tmp_path / "f2")]) == 0
    assert (tmp_path / "f2" / "gpu_utilization.png").exists()
    assert not (tmp_path / "f2" / "link_classes.png").exists()
    assert plot.main([str(tmp_path / "nothing-here")]) == 2


def test_plot_filter_and_conditions(tmp_path):
    out = tmp_path / "sw"
    make_run(out / "flux__default__s1__host-rate-10", "flux", 1)
    make_run(out / "flux__default__s1__host-rate-20", "flux", 1)
    with open(out / "flux__default__s1__host-rate-20" / "config.json") as f:
        cfg = json.load(f)
    (out / "sweep.json").write_text(json.dumps({"set_axes": ["host-rate"], "combinations": [
        {"id": "flux__default__s1__host-rate-10", "scheduler": "flux", "scenario": "default", "seed": 1,
         "set": {"host-rate": "10"}},
        {"id": "flux__default__s1__host-rate-20", "scheduler": "flux", "scenario": "default", "seed": 1,
         "set": {"host-rate": "20"}}]}))
    assert cfg["scheduler"] == "flux"
    figs = tmp_path / "figs"
    assert plot.main([str(out), "--out", str(figs), "--format", "png"]) == 0
    # One CDF file per condition; the utilisation bars are grouped by condition.
    assert (figs / "iteration_cdf.png").exists() and (figs / "iteration_cdf_host-rate-20.png").exists()
    figs2 = tmp_path / "figs2"
    assert plot.main([str(out), "--out", str(figs2), "--format", "png", "--filter", "host-rate=20"]) == 0
    assert "host-rate-10" not in (figs2 / "captions.md").read_text()


# ------------------------------------------------------------------------------------------------ link classes
def test_bytes_are_split_over_classes_in_proportion_to_time():
    segs = plot.class_segments(10.0, 10.2, [(9.0, 5), (10.05, 7), (10.1, 0)])
    assert segs == [(10.0, 10.05, 5), (10.05, 10.1, 7), (10.1, 10.2, 0)]
    assert plot.class_segments(0.0, 1.0, []) == [(0.0, 1.0, 0)]
    assert plot.counter_increments([(0, 0), (1, 100), (2, 100), (3, 40)]) == [(0, 1, 100), (2, 3, 40)]


def test_leaf_uplink_by_class_on_synthetic_run(tmp_path):
    run = tmp_path / "run"
    make_run(run, "flux", 1)
    tr = plot.leaf_uplink_by_class(str(run), bin_s=0.1)
    # Leaf 1 sends rank 0 of both jobs across the spine: 2 flows at 12500 B / 0.1 s = 1 Mbit/s each.
    assert tr.flows == 2 and tr.capacity_mbps == 10.0
    total = sum(tr.by_class.values())
    assert total == pytest.approx([2.0] * len(total))
    # vgg's flow is class 7 from 1.05 s to 2.0 s; bert's class 3 from 1.5 s on.
    assert tr.by_class[7].sum() * 0.1 == pytest.approx(0.95, abs=1e-6)
    assert tr.by_class[3].sum() * 0.1 == pytest.approx(1.5, abs=1e-6)
    assert tr.ports is not None and tr.ports.mean() == pytest.approx(2.08)


def test_reanalyse_redoes_the_reconstruction_and_keeps_the_rest(tmp_path):
    from cli import reanalyse
    run = tmp_path / "sw" / "crux__default__s1"
    make_run(run, "crux", 1)
    before = json.loads((run / "summary.json").read_text())
    assert reanalyse.main([str(tmp_path / "sw")]) == 0
    after = json.loads((run / "summary.json").read_text())
    # The run's own fields were written before config.flags existed: it stays what it was, schema version 1.
    assert after["schema_version"] == 1 and "reanalysed_at" in after["reconstruction"]
    assert after["cluster"]["gpu_utilization"] == before["cluster"]["gpu_utilization"]
    assert after["fidelity"] == before["fidelity"] and after["config"] == before["config"]
    assert set(after["reconstruction"]["jobs"]) == {"vgg", "bert"}
    assert reanalyse.main([str(tmp_path / "empty")]) == 2
