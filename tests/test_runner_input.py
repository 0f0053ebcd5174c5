"""The runner's handling of bad input: one line on stderr, exit 2, no traceback, nothing started (no root)."""
import json
import os
import subprocess
import sys

import pytest

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]


def run(*args, **kw):
    return subprocess.run(RUN + list(args), capture_output=True, text=True, timeout=60, **kw)


def test_help_explains_every_flag():
    r = run("--help")
    assert r.returncode == 0
    for flag in ("--scheduler", "--scenario", "--out", "--spines", "--leaves", "--hosts-per-leaf", "--host-rate",
                 "--fabric-rate", "--poll-interval", "--param", "--seed", "--datapath", "--class-floor"):
        assert flag in r.stdout
    assert "flux" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--scheduler", "nope"], "unknown scheduler 'nope'; known: bytescheduler, crux, ecmp, flux"),
    (["--spines", "0"], "--spines must be >= 1"),
    (["--host-rate", "0"], "--host-rate must be between"),
    (["--scenario", "/nonexistent/x.yaml"], "no such file"),
    (["--scheduler", "flux", "--param", "nonsense=1"], "nonsense"),
    (["--param", "novalue"], "name=value"),
    (["--poll-interval", "0"], "--poll-interval"),
    (["--hosts-per-leaf", "1", "--leaves", "2"], "hosts"),  # 2 hosts cannot hold the default jobs
    (["--queue-ms", "0"], "--queue-ms 0 is shorter than one 1500-byte packet at 10 Mbit/s"),
    (["--fabric-rate", "5", "--queue-ms", "2"], "--queue-ms 2 is shorter than one 1500-byte packet at 5 Mbit/s"),
    (["--run-id", "../../x"], "--run-id '../../x': use one folder name"),
    (["--run-id", ".."], "--run-id '..'"),
    (["--run-id", "a/b"], "--run-id 'a/b'"),
    (["--engine", "fluid", "--twin-set", "nonsense=1"], "unknown model parameter(s) nonsense"),
    (["--engine", "fluid", "--twin-set", "progress_weight=x"], "'progress_weight=x': 'x' is not a number"),
    (["--engine", "fluid", "--twin-set", "goodput"], "not of the form name=value"),
    (["--engine", "fluid", "--twin-set", "goodput=1.5"], "goodput must be in (0, 1]"),
    (["--engine", "fluid", "--twin-model", "/nonexistent.json"], "--twin-model"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    r = run(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_bad_scenario_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\njobs:\n  - {name: a, model: resnet50, workers: 1, iterations: 2}\n")
    r = run("--scenario", str(bad))
    assert r.returncode == 2
    assert "bad.yaml" in r.stderr and "workers" in r.stderr and "Traceback" not in r.stderr


def test_not_root_is_refused(monkeypatch, capsys):
    # In-process with a non-root uid, so the check is exercised whoever runs the tests.
    sys.path.insert(0, PROJECT_DIR)
    from cli import run as runner
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    assert runner.main(["--scheduler", "ecmp"]) == 2
    err = capsys.readouterr().err
    assert "must run as root" in err and len(err.strip().splitlines()) == 1


def test_out_naming_an_existing_file_is_refused(tmp_path):
    existing = tmp_path / "summary.json"
    existing.write_text("{}")
    r = run("--out", str(existing))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"run.py: --out {existing}: exists and is not a directory"
    assert existing.read_text() == "{}"


def test_outcome_fails_on_any_failure_and_flags_an_unfaithful_run():
    sys.path.insert(0, PROJECT_DIR)
    from cli import run as runner
    assert runner.outcome([], True) == (True, None, runner.EXIT_OK)
    assert runner.outcome([], None) == (True, None, runner.EXIT_OK)  # no workload: nothing to judge
    assert runner.outcome([], False) == (True, None, runner.EXIT_UNFAITHFUL)
    ok, error, code = runner.outcome(["the scheduler controller exited (code -9)", "workers failed: a rank 0",
                                      "the scheduler controller exited (code -9)"], False)
    assert (ok, code) == (False, runner.EXIT_FAILED)
    assert error == "the scheduler controller exited (code -9); workers failed: a rank 0"


def test_the_fluid_ring_model_is_chosen_by_a_flag_and_recorded(tmp_path):
    # auto simulates every ring step at this size; the flag asks for whole rings and the summary says which ran.
    for choice, expected in (("auto", "steps"), ("pipelined", "pipelined")):
        out = tmp_path / choice
        r = run("--engine", "fluid", "--scenario", os.path.join(PROJECT_DIR, "workloads", "scenarios", "smoke.yaml"),
                "--twin-ring-model", choice, "--quiet", "--out", str(out))
        assert r.returncode == 0, r.stderr
        summary = json.load(open(out / "summary.json"))
        assert summary["twin"]["ring_model"] == expected
        assert summary["config"]["flags"]["twin-ring-model"] == choice
    r = run("--engine", "fluid", "--twin-ring-model", "rings")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--twin-ring-model" in r.stderr
