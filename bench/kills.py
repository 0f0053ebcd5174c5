#!/usr/bin/env python3
"""Random kills of the runner: does every exit path leave the machine as it found it, and quickly?

    sudo python bench/kills.py [--trials 20] [--seed 1] [--max-delay 18]

Each trial starts ``testbed/run.py`` (the default scenario unless ``-- RUN_ARGS`` say otherwise), waits a random
0.3 to ``--max-delay`` seconds (so every phase gets hit: build, checks, workload, teardown) and sends SIGINT,
SIGTERM or SIGKILL at random. Then it measures:

* for SIGINT and SIGTERM: the seconds until the runner exited (target: under 10 s) and what was left behind;
* for SIGKILL: what was left right after (the fabric's bridges are expected; processes are not: they die with
  the runner) and what was left after the next run, which must remove it (``--no-workload --skip-checks`` on
  a small fabric).

"Left behind" is ``testbed/state.py``'s snapshot compared with the one taken before the first trial: testbed
processes (by their run token), OVS bridges, root-namespace interfaces, named namespaces, the state file.
Prints one JSON document: every trial, and a summary with the targets' verdicts.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]
SMOKE = os.path.join(PROJECT_DIR, "workloads", "scenarios", "smoke.yaml")
NEXT_RUN = ["--spines", "1", "--leaves", "2", "--hosts-per-leaf", "2", "--scenario", SMOKE, "--no-workload",
            "--skip-checks", "-q"]
EXIT_TARGET_S = 10.0
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def last_phase(log_path: str) -> str:
    """The last phase line the runner printed before the signal."""
    phase = "before the fabric"
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                for tag in ("[1/4]", "[2/4]", "[3/4]", "[4/4]"):
                    if tag in line:
                        phase = line.split(tag, 1)[1].split(":")[0].strip() or tag
    except OSError:
        pass
    return phase


def trial(index: int, sig: int, delay: float, run_args, work: str, before) -> dict:
    from testbed import state
    log_path = os.path.join(work, f"trial-{index}.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(RUN + run_args + ["--out", os.path.join(work, f"trial-{index}")],
                                stdout=log, stderr=subprocess.STDOUT)
        record = {"trial": index, "signal": signal.Signals(sig).name, "delay_s": round(delay, 2)}
        try:
            proc.wait(delay)
            record["finished_before_signal"] = True
        except subprocess.TimeoutExpired:
            record["phase"] = last_phase(log_path)
            t0 = time.monotonic()
            proc.send_signal(sig)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                record["hung"] = True
            record["exit_s"] = round(time.monotonic() - t0, 2)
        record["exit_code"] = proc.returncode
    if sig == signal.SIGKILL and not record.get("finished_before_signal"):
        left = state.new_since(before, grace_s=1.0)
        record["left_after_kill"] = {kind: len(names) for kind, names in left.items()}
        next_run = subprocess.run(RUN + NEXT_RUN + ["--out", os.path.join(work, f"trial-{index}-next")],
                                  capture_output=True, text=True, timeout=300)
        record["next_run_exit_code"] = next_run.returncode
    left = state.new_since(before, grace_s=1.0)
    record["left_behind"] = left
    if left:  # keep later trials independent of this one
        state.remove_things(left)
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20, help="number of kills")
    p.add_argument("--seed", type=int, default=1, help="seed for the signals and delays")
    p.add_argument("--min-delay", type=float, default=0.3, help="earliest signal, seconds after the start")
    p.add_argument("--max-delay", type=float, default=18.0, help="latest signal, seconds after the start")
    p.add_argument("run_args", nargs="*", metavar="-- RUN_ARGS", help="arguments for testbed/run.py")
    args = p.parse_args(argv)
    if args.trials < 1 or not 0 <= args.min_delay <= args.max_delay:
        sys.stderr.write("bench/kills.py: --trials must be >= 1 and 0 <= --min-delay <= --max-delay\n")
        return 2
    if os.geteuid() != 0:
        sys.stderr.write("bench/kills.py: must run as root (it runs the testbed)\n")
        return 2
    from testbed import state
    rng = random.Random(args.seed)
    before = state.snapshot()
    trials = []
    with tempfile.TemporaryDirectory(prefix="bench-kills-") as work:
        for i in range(args.trials):
            sig, delay = rng.choice(SIGNALS), rng.uniform(args.min_delay, args.max_delay)
            record = trial(i, sig, delay, args.run_args, work, before)
            trials.append(record)
            sys.stderr.write(f"[{i + 1}/{args.trials}] {record['signal']} at {record['delay_s']} s "
                             f"({record.get('phase', 'after the run ended')}): exit {record['exit_code']}"
                             f"{' in %.2f s' % record['exit_s'] if 'exit_s' in record else ''}, "
                             f"left behind: {record['left_behind'] or 'nothing'}\n")
    interrupts = [t for t in trials if t["signal"] != "SIGKILL" and "exit_s" in t]
    kills = [t for t in trials if t["signal"] == "SIGKILL" and "exit_s" in t]
    summary = {
        "trials": len(trials),
        "signalled": len(interrupts) + len(kills),
        "sigint_sigterm": len(interrupts),
        "sigkill": len(kills),
        "max_exit_s_sigint_sigterm": max((t["exit_s"] for t in interrupts), default=None),
        "exit_target_s": EXIT_TARGET_S,
        "processes_alive_after_sigkill": sum(t["left_after_kill"].get("process", 0) for t in kills),
        "trials_leaving_something": sum(1 for t in trials if t["left_behind"]),
        "hung": sum(1 for t in trials if t.get("hung")),
    }
    summary["next_runs_failed"] = sum(1 for t in kills if t.get("next_run_exit_code") != 0)
    summary["ok"] = (summary["trials_leaving_something"] == 0 and summary["hung"] == 0
                     and summary["processes_alive_after_sigkill"] == 0 and summary["next_runs_failed"] == 0
                     and all(t["exit_s"] < EXIT_TARGET_S for t in interrupts))
    print(json.dumps({"command": " ".join(sys.argv), "seed": args.seed, "summary": summary, "trials": trials},
                     indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
