#!/usr/bin/env python3
"""The twin against the faithful emulation runs of several suite folders (more seeds of the same pairs), as Markdown.

Question: Do the twin's misses on the suite hold over more emulation seeds (seeds 1-9, faithful runs only)?
Answer: Mostly: Crux's and Flux's stress-8 BERT b stay the largest (+0.092 and +0.113, +0.028 and +0.049 without
priority_hol_packets), small-first and ECMP's vgg-gpt2, bert-gpt2 and same-model misses shrink to 0.03-0.06.
Cited in: docs/twin-log.md, Against the suite.

    python research/seeds_table.py --twin results/suite/fluid --pairs stress-8/crux,small-first/flux \\
        results/suite/emulation results/suite/emulation-seeds-4-9

For each (scenario, variant) pair: the emulation's faithful completed runs found in any of the folders (their
``<scenario>/<variant>/summary.csv``), the cluster's mean [min, max] over them beside the twin's mean, and the
same for the job whose mean differs most. Runs the fidelity verdict calls unfaithful are left out and counted.
``scripts/suite.py --compare`` does this for one folder of each engine; this adds up seeds kept in several.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import List, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


from analysis.seeds import completed_runs
from experiment.results import CLUSTER


def spread(values: List[float]) -> str:
    return f"{statistics.mean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def table(emulation: List[str], twin: str, pairs: List[Tuple[str, str]]) -> str:
    lines = ["| scenario | variant | faithful runs (left out) | cluster, emulation | twin | job | job, emulation "
             "| twin |", "|---|---|---|---|---|---|---|---|"]
    for scenario, variant in pairs:
        runs, left_out = completed_runs(emulation, scenario, variant, faithful_only=True)
        theirs, _ = completed_runs([twin], scenario, variant, faithful_only=False)
        if not runs or not theirs:
            lines.append(f"| {scenario} | {variant} | {len(runs)} ({left_out}) | no runs | | | | |")
            continue
        per_job = {job: [r[job] for r in runs.values() if job in r] for job in next(iter(runs.values()))}
        twin_mean = {job: statistics.mean(r[job] for r in theirs.values()) for job in per_job
                     if all(job in r for r in theirs.values())}
        jobs = [j for j in per_job if j != CLUSTER and j in twin_mean]
        worst = max(jobs, key=lambda j: abs(twin_mean[j] - statistics.mean(per_job[j])))
        cluster = per_job[CLUSTER]
        lines.append(f"| {scenario} | {variant} | {len(runs)} ({left_out}) | {spread(cluster)} "
                     f"| {twin_mean[CLUSTER]:.3f} ({twin_mean[CLUSTER] - statistics.mean(cluster):+.3f}) | {worst} "
                     f"| {spread(per_job[worst])} "
                     f"| {twin_mean[worst]:.3f} ({twin_mean[worst] - statistics.mean(per_job[worst]):+.3f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("emulation", nargs="+", help="suite folders of emulation runs (scripts/suite.py --out)")
    p.add_argument("--twin", required=True, help="the twin's suite folder")
    p.add_argument("--pairs", required=True, help="comma-separated scenario/variant pairs")
    args = p.parse_args(argv)
    pairs = []
    for item in args.pairs.split(","):
        scenario, sep, variant = item.strip().partition("/")
        if not sep or not scenario or not variant:
            sys.stderr.write(f"seeds_table.py: --pairs: {item!r} is not scenario/variant\n")
            return 2
        pairs.append((scenario, variant))
    for folder in args.emulation + [args.twin]:
        if not os.path.isdir(folder):
            sys.stderr.write(f"seeds_table.py: no folder {folder}\n")
            return 2
    print(table(args.emulation, args.twin, pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
