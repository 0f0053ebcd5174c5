"""Finding and ending what a run started (testbed/state.py), without root: identity by start time, the run
token inherited by children, ending many processes at once, and the leftover snapshot the tests' guard uses."""
import os
import signal
import subprocess
import sys
import time

import pytest

from testbed import state

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); " \
                  "time.sleep(60)"


def start(code, token=None, **kw):
    env = dict(os.environ)
    env.pop(state.MARKER, None)
    if token:
        env[state.MARKER] = token
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kw)
    assert p.stdout.readline().strip() == "up"
    return p


@pytest.fixture
def isolated_state(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(state, "STATE_FILE", str(tmp_path / "state.json"))
    return tmp_path


def test_processes_that_ignore_sigterm_are_ended_together_within_the_grace():
    procs = [start(IGNORES_SIGTERM) for _ in range(6)]
    t0 = time.monotonic()
    ended = state.end_processes([(p.pid, signal.SIGTERM) for p in procs], grace_s=0.5)
    elapsed = time.monotonic() - t0
    assert sorted(ended) == sorted(p.pid for p in procs)
    assert all(p.wait(5) == -signal.SIGKILL for p in procs)  # exit status kept for Popen (not reaped)
    assert elapsed < 2.0, elapsed  # one grace for all, not one each


def test_marked_children_are_found_by_token_even_after_exec(isolated_state):
    run = state.RunState("t", str(isolated_state))
    # A shell that execs python: the recorded command line changes, the pid, start time and token do not.
    child = subprocess.Popen(["sh", "-c", f"exec {sys.executable} -c \"{IGNORES_SIGTERM}\""],
                             env=dict(os.environ, **{state.MARKER: run.token}), stdout=subprocess.PIPE, text=True)
    run.add_process(child.pid, "h1: sender")
    assert child.stdout.readline().strip() == "up"
    grandchild = start(IGNORES_SIGTERM, token=run.token)  # never recorded
    stranger = start(IGNORES_SIGTERM, token="another-run")
    try:
        found = dict(state.run_processes(run.data))
        assert child.pid in found and grandchild.pid in found and stranger.pid not in found
        removed = state.remove(run.data)
        assert any(str(child.pid) in r for r in removed) and any(str(grandchild.pid) in r for r in removed)
        assert child.wait(5) and grandchild.wait(5)
        assert stranger.poll() is None
        assert state.leftovers(run.data) == []
    finally:
        for p in (child, grandchild, stranger):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_reused_pid_is_not_killed(isolated_state):
    run = state.RunState("t", str(isolated_state))
    p = start(IGNORES_SIGTERM)
    try:
        run.data["processes"].append({"pid": p.pid, "role": "worker", "start_time": state.start_time(p.pid) - 1,
                                      "cmdline": ""})
        assert state.run_processes(run.data) == []
        state.remove(run.data)
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_active_run_is_the_recorded_runner_only(isolated_state):
    p = start(IGNORES_SIGTERM)
    try:
        run = state.RunState("t", str(isolated_state))
        run.data["runner_pid"], run.data["runner_start_time"] = p.pid, state.start_time(p.pid)
        run.save()
        assert state.active_run()["runner_pid"] == p.pid
        run.data["runner_start_time"] -= 1  # the same pid, another process
        run.save()
        assert state.active_run() is None
    finally:
        p.kill()
        p.wait()


def test_snapshot_sees_a_marked_process_and_a_state_file(isolated_state, monkeypatch):
    monkeypatch.setattr(state, "_bridges", lambda: [])  # no Open vSwitch needed for this part
    before = state.snapshot()
    p = start(IGNORES_SIGTERM, token="leak")
    (isolated_state / "state.json").write_text("{}")
    new = state.new_since(before)
    # Only what this test made is asserted and removed: another test session may run on the machine.
    assert str(p.pid) in new["process"] and new["state file"] == [str(isolated_state / "state.json")]
    state.remove_things({"process": [str(p.pid)], "state file": new["state file"]})
    assert p.wait(5) == -signal.SIGKILL
    after = state.new_since(before)
    assert str(p.pid) not in after.get("process", []) and "state file" not in after
