#!/usr/bin/env python3
"""Recompute the counter-based reconstruction of finished runs and update their summary.json.

    python scripts/reanalyse.py results/sweep-headline/*/        # run folders, or a sweep folder

The reconstruction (testbed/reconstruct.py) only reads files the run wrote (flow_stats.csv, controller.json,
summary.json, through experiment/results.py), so it can be redone without root or Mininet, e.g. after a change to the
method. The summary keeps everything else; ``reconstruction.reanalysed_at`` records when it was redone.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


from testbed import reconstruct
from experiment.results import RunFolder


def run_folders(paths):
    """The run folders among ``paths`` and their sub-folders (a sweep), those with a summary."""
    for path in paths:
        folder = RunFolder(path)
        if folder.has(RunFolder.SUMMARY):
            yield folder
        elif os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                sub = RunFolder(os.path.join(path, name))
                if sub.has(RunFolder.SUMMARY):
                    yield sub


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="run folders or sweep folders")
    a = p.parse_args(argv)
    done = 0
    for folder in run_folders(a.paths):
        summary = folder.summary()
        if summary is None or not summary.jobs:
            continue
        summary.apply_reconstruction(dict(reconstruct.analyse_run(folder, summary), reanalysed_at=time.time()))
        folder.write_summary(summary)
        mae = summary.reconstruction.get("idle_mae_frac_of_iteration")
        print(f"{folder.path}: idle error {mae if mae is None else f'{mae:.4f}'} of the iteration time")
        done += 1
    if not done:
        sys.stderr.write("reanalyse.py: no run folder with a summary.json found\n")
        return 2
    return 0
