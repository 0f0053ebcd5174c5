#!/usr/bin/env python3
"""Recompute the counter-based reconstruction of finished runs and update their summary.json.

    python scripts/reanalyse.py results/sweep-headline/*/        # run folders, or a sweep folder

The reconstruction (testbed/reconstruct.py) only reads files the run wrote (flow_stats.csv, controller.json,
summary.json), so it can be redone without root or Mininet, e.g. after a change to the method. The summary keeps
everything else; ``reconstruction.reanalysed_at`` records when it was redone.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from testbed.bootstrap import ensure_env  # noqa: E402  (standard library only)

if __name__ == "__main__":
    ensure_env("reanalyse.py", needs_fabric=False)  # set up what is missing, continue in .venv

from testbed import reconstruct  # noqa: E402


def run_dirs(paths):
    for path in paths:
        if os.path.isfile(os.path.join(path, "summary.json")):
            yield path
        elif os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                sub = os.path.join(path, name)
                if os.path.isfile(os.path.join(sub, "summary.json")):
                    yield sub


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="run folders or sweep folders")
    a = p.parse_args(argv)
    done = 0
    for run in run_dirs(a.paths):
        path = os.path.join(run, "summary.json")
        with open(path) as f:
            summary = json.load(f)
        if not summary.get("jobs"):
            continue
        summary.update(reconstruct.analyse_run(run, summary))
        summary["reconstruction"]["reanalysed_at"] = time.time()
        with open(path, "w") as f:
            json.dump(summary, f, indent=2, default=str)
        mae = summary["reconstruction"].get("idle_mae_frac_of_iteration")
        print(f"{run}: idle error {mae if mae is None else f'{mae:.4f}'} of the iteration time")
        done += 1
    if not done:
        sys.stderr.write("reanalyse.py: no run folder with a summary.json found\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
