#!/usr/bin/env python3
"""How well do the link counters alone reconstruct each job's GPU idle time, on every shipped scenario?

    sudo python bench/reconstruction.py [--schedulers ecmp,flux] [--seed 1] [--scenarios NAME,...]

Runs every shipped scenario (workloads/scenarios/*.yaml, each with the fabric flags its file documents) under
each scheduler (ECMP never changes a class; Flux changes them most, so its counters are the hardest to read),
then compares testbed/reconstruct.py's estimate with the workers' own logs. The figure of merit is a job's
absolute idle-time error as a fraction of its iteration time, at the default 0.1 s polling; the target is 3%
for every job. Prints one JSON document: every run with its per-job errors, and the verdict.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


from experiment.results import RunFolder

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]
SCENARIOS_DIR = os.path.join(PROJECT_DIR, "workloads", "scenarios")
TARGET = 0.03
# The fabric each shipped scenario is written for (its file's header says why).
SCENARIO_FLAGS = {
    "default": [],
    "smoke": ["--spines", "1", "--leaves", "2", "--hosts-per-leaf", "2"],
    "headline": ["--host-rate", "5", "--fabric-rate", "5"],
    "same-model": [],
}


def measure(scenario: str, scheduler: str, seed: int, work: str) -> dict:
    out = os.path.join(work, f"{scenario}-{scheduler}")
    cmd = RUN + ["--scheduler", scheduler, "--scenario", os.path.join(SCENARIOS_DIR, f"{scenario}.yaml"),
                 "--seed", str(seed), "--out", out, "-q"] + SCENARIO_FLAGS.get(scenario, [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    record = {"scenario": scenario, "scheduler": scheduler, "seed": seed, "exit_code": r.returncode,
              "flags": SCENARIO_FLAGS.get(scenario, [])}
    summary = RunFolder(out).summary()
    if summary is None:
        record["error"] = (r.stderr.strip().splitlines() or ["no summary"])[-1]
        return record
    rec = summary.reconstruction
    record["faithful"] = summary.faithful
    record["jobs"] = {name: {"error_frac_of_iteration": entry.get("idle_abs_error_frac_of_iteration"),
                             "error_s": entry.get("idle_error_s"), "estimate_error": entry.get("error")}
                      for name, entry in (rec.get("jobs") or {}).items()}
    errors = [j["error_frac_of_iteration"] for j in record["jobs"].values()]
    record["max_error_frac"] = max(errors) if errors and None not in errors else None
    record["by_poll_interval"] = {f"{row['poll_interval_s']:g}": row.get("idle_max_err_frac_of_iteration")
                                  for row in rec.get("by_poll_interval") or []}
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedulers", default="ecmp,flux", help="comma-separated schedulers")
    p.add_argument("--scenarios", default=",".join(SCENARIO_FLAGS), help="comma-separated shipped scenarios")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if not os.path.isfile(os.path.join(SCENARIOS_DIR, f"{s}.yaml"))]
    if unknown:
        sys.stderr.write(f"bench/reconstruction.py: no shipped scenario {', '.join(unknown)}\n")
        return 2
    if os.geteuid() != 0:
        sys.stderr.write("bench/reconstruction.py: must run as root (it runs the testbed)\n")
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-reconstruction-") as work:
        for scenario in scenarios:
            for scheduler in [s for s in args.schedulers.split(",") if s]:
                record = measure(scenario, scheduler, args.seed, work)
                runs.append(record)
                sys.stderr.write(f"{scenario} / {scheduler}: max error {record.get('max_error_frac')} of the "
                                 f"iteration time (exit {record['exit_code']})\n")
    worst = [r["max_error_frac"] for r in runs]
    met = bool(runs) and all(w is not None and w <= TARGET for w in worst)
    print(json.dumps({"command": " ".join(sys.argv), "target_frac_of_iteration": TARGET,
                      "worst_frac_of_iteration": max((w for w in worst if w is not None), default=None),
                      "met": met, "runs": runs}, indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
