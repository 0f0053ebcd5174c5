#!/usr/bin/env python3
"""How well the emulation agrees with itself, judged by the bands the twin is judged by; JSON on stdout.

    python scripts/agreement_floor.py --emulation results/suite/emulation --twin results/suite/fluid \\
        --repeat results/suite/emulation-repeat-s1 --md results/suite/emulation-repeat-s1/agreement.md

docs/twin.md holds the twin to the emulation's mean over its seeds: the cluster within ±0.03 and every job
within ±0.05. Whether any model can meet that depends on how far one emulation run falls from the emulation's
own mean, which this measures three ways, per variant over the suite's scenarios:

- leave one out: each completed emulation run against the mean of the pair's other runs (other seeds), and the
  twin against the same means, so both are judged on the same trials;
- repeat (with ``--repeat``): runs made again later (same scenario, variant and seed, another suite folder)
  against the suite's mean over all its seeds, as ``scripts/suite.py --compare`` judges the twin;
- retest: each repeated run against the original run of the same seed.

For each it counts the trials with the cluster within ±0.03, with every job within ±0.05 and with both, and
gives the mean absolute differences (cluster; the job furthest off). It also counts and lists the pairs of
variants that the suite's means separate by more than 0.01 and the repeat (or the twin) orders the other way
(each variant's figure in the suite / in the other), and lists the
twin's misses with, on the same pair, the largest leave-one-out differences of the twin and of one emulation
run (both against the same means).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional, Tuple

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from testbed.bootstrap import ensure_env  # noqa: E402  (standard library only)

if __name__ == "__main__":
    # Set up what is missing and continue in .venv; tables need no fabric.
    ensure_env("agreement_floor.py", needs_fabric=False)

from scripts.seeds_table import Runs, completed_runs  # noqa: E402
from scripts.suite import CLUSTER_BAND, JOB_BAND, discordant_pairs  # noqa: E402
from experiment.results import CLUSTER, SUMMARY_CSV  # noqa: E402

Figures = Dict[str, float]      # job (or CLUSTER) -> GPU utilisation


def mean_figures(runs: List[Figures]) -> Figures:
    """Each job's (and the cluster's) mean over runs that all have it."""
    common = set.intersection(*(set(r) for r in runs))
    return {job: statistics.mean(r[job] for r in runs) for job in common}


def judge(figures: Figures, reference: Figures) -> Tuple[float, float]:
    """The cluster's difference and the largest absolute difference of a job, figures minus reference."""
    jobs = [j for j in reference if j != CLUSTER and j in figures]
    worst = max((abs(figures[j] - reference[j]) for j in jobs), default=0.0)
    return figures[CLUSTER] - reference[CLUSTER], worst


class Tally:
    """Trials of one kind for one variant: how many fall within the bands, and the mean absolute differences."""

    def __init__(self) -> None:
        self.cluster: List[float] = []
        self.worst_job: List[float] = []

    def add(self, figures: Figures, reference: Figures) -> None:
        cluster, worst = judge(figures, reference)
        self.cluster.append(cluster)
        self.worst_job.append(worst)

    def to_dict(self) -> dict:
        both = sum(abs(c) <= CLUSTER_BAND and w <= JOB_BAND for c, w in zip(self.cluster, self.worst_job))
        n = len(self.cluster)
        return {"trials": n,
                "cluster_within": sum(abs(c) <= CLUSTER_BAND for c in self.cluster),
                "jobs_within": sum(w <= JOB_BAND for w in self.worst_job),
                "both_within": both,
                "mean_abs_cluster": statistics.mean(abs(c) for c in self.cluster) if n else None,
                "mean_abs_worst_job": statistics.mean(self.worst_job) if n else None}


def run_id(key: str) -> str:
    """completed_runs() keys a run by '<folder>:<run id>'; the run id is what two folders share."""
    return key.rsplit(":", 1)[1]


def scenarios_and_variants(folder: str) -> List[Tuple[str, str]]:
    pairs = []
    for scenario in sorted(os.listdir(folder)):
        if not os.path.isdir(os.path.join(folder, scenario)):
            continue
        for variant in sorted(os.listdir(os.path.join(folder, scenario))):
            if os.path.exists(os.path.join(folder, scenario, variant, SUMMARY_CSV)):
                pairs.append((scenario, variant))
    return pairs


def agreement(emulation: str, twin: Optional[str], repeat: Optional[str],
              variants: Optional[List[str]] = None, faithful_only: bool = False) -> dict:
    """The three measures (module docstring) for every (scenario, variant) pair of the emulation's suite folder
    that has at least two completed runs, per variant; with ``faithful_only``, emulation runs the fidelity verdict
    calls unfaithful are left out (in both emulation folders)."""
    kinds = ["leave_one_out", "twin_leave_one_out", "twin", "repeat", "retest"]
    tallies: Dict[str, Dict[str, Tally]] = {}
    ranked: Dict[str, list] = {"twin": [], "repeat": []}
    unfaithful: Dict[str, int] = {}
    twin_misses: List[dict] = []
    for scenario, variant in scenarios_and_variants(emulation):
        if variants and variant not in variants:
            continue
        runs: Runs = completed_runs([emulation], scenario, variant, faithful_only)[0]
        if len(runs) < 2:
            continue
        t = tallies.setdefault(variant, {k: Tally() for k in kinds})
        suite_mean = mean_figures(list(runs.values()))
        twin_figures = None
        if twin:
            twin_runs = completed_runs([twin], scenario, variant, faithful_only=False)[0]
            twin_figures = mean_figures(list(twin_runs.values())) if twin_runs else None
        own, twins = Tally(), Tally()
        for key, figures in runs.items():
            others = mean_figures([r for k, r in runs.items() if k != key])
            own.add(figures, others)
            t["leave_one_out"].add(figures, others)
            if twin_figures:
                twins.add(twin_figures, others)
                t["twin_leave_one_out"].add(twin_figures, others)
        if twin_figures:
            t["twin"].add(twin_figures, suite_mean)
            cluster, worst = judge(twin_figures, suite_mean)
            if abs(cluster) > CLUSTER_BAND or worst > JOB_BAND:
                # Beside each miss, the twin and each emulation run against the same references (the mean of
                # the pair's other runs): where one emulation run falls as far, the miss is within what the
                # emulation reproduces.
                twin_misses.append({"scenario": scenario, "variant": variant, "cluster": cluster,
                                    "worst_job": worst, "runs": len(runs),
                                    "twin_max_abs_cluster": max(abs(c) for c in twins.cluster),
                                    "twin_max_worst_job": max(twins.worst_job),
                                    "emulation_max_abs_cluster": max(abs(c) for c in own.cluster),
                                    "emulation_max_worst_job": max(own.worst_job)})
            ranked["twin"].append({"scenario": scenario, "variant": variant, "u": suite_mean[CLUSTER],
                                   "u_other": twin_figures[CLUSTER]})
        if repeat:
            again = completed_runs([repeat], scenario, variant, faithful_only)[0]
            originals = {run_id(k): r for k, r in runs.items()}
            for key, figures in again.items():
                t["repeat"].add(figures, suite_mean)
                if run_id(key) in originals:
                    t["retest"].add(figures, originals[run_id(key)])
            if again:
                ranked["repeat"].append({"scenario": scenario, "variant": variant, "u": suite_mean[CLUSTER],
                                         "u_other": mean_figures(list(again.values()))[CLUSTER]})
            # completed_runs() counts the runs it leaves out as unfaithful.
            left_out = completed_runs([repeat], scenario, variant, faithful_only=True)[1]
            unfaithful[variant] = unfaithful.get(variant, 0) + left_out
    out = {"bands": {"cluster": CLUSTER_BAND, "job": JOB_BAND}, "faithful_only": faithful_only,
           "emulation": emulation, "twin": twin, "repeat": repeat,
           "variants": {v: {k: t.to_dict() for k, t in kinds_.items() if t.cluster}
                        for v, kinds_ in tallies.items()},
           "discordant_pairs": {k: len(discordant_pairs(v)) for k, v in ranked.items() if v},
           "discordant_pair_list": {k: discordant_pairs(v) for k, v in ranked.items() if v},
           "twin_misses": twin_misses}
    if repeat:
        out["repeat_runs_unfaithful"] = unfaithful
    return out


LABELS = {"leave_one_out": "one emulation run against the other seeds' mean",
          "twin_leave_one_out": "the twin against the same means",
          "twin": "the twin against all seeds' mean",
          "repeat": "a repeated run against all seeds' mean",
          "retest": "a repeated run against the same seed's run"}


def markdown(result: dict) -> str:
    lines = [f"Trials within the bands (cluster ±{result['bands']['cluster']}, every job ±{result['bands']['job']}; "
             "both) and mean absolute differences (cluster / the job furthest off), per variant. Emulation: "
             f"{result['emulation']}; twin: {result['twin']}; repeated runs: {result['repeat']}.", "",
             "| variant | measure | trials | cluster within | every job within | both | "
             "mean abs. cluster / worst job |",
             "|---|---|---|---|---|---|---|"]
    for variant, kinds in result["variants"].items():
        for kind, t in kinds.items():
            lines.append(f"| {variant} | {LABELS[kind]} | {t['trials']} | {t['cluster_within']} | "
                         f"{t['jobs_within']} | {t['both_within']} | "
                         f"{t['mean_abs_cluster']:.3f} / {t['mean_abs_worst_job']:.3f} |")
    if result["twin_misses"]:
        lines += ["", "The twin's misses (against all seeds' mean) and, against the mean of the pair's other runs "
                  "(leave one out), the twin's and one emulation run's largest differences:", "",
                  "| scenario | variant | twin: cluster / worst job | leave one out, twin at most | "
                  "leave one out, one emulation run at most |",
                  "|---|---|---|---|---|"]
        lines += [f"| {m['scenario']} | {m['variant']} | {m['cluster']:+.3f} / {m['worst_job']:.3f} | "
                  f"{m['twin_max_abs_cluster']:.3f} / {m['twin_max_worst_job']:.3f} | "
                  f"{m['emulation_max_abs_cluster']:.3f} / {m['emulation_max_worst_job']:.3f} |"
                  for m in result["twin_misses"]]
    lines += ["", "Pairs of variants the suite's means separate by more than 0.01 and the other orders the other "
              "way: " + ", ".join(f"{k} {n}" for k, n in result["discordant_pairs"].items()) + "."]
    for kind, pairs in (result.get("discordant_pair_list") or {}).items():
        lines += [f"- {kind}, {p['scenario']}: {p['a']} {p['u_a']:.3f} / {p['other_a']:.3f} against {p['b']} "
                  f"{p['u_b']:.3f} / {p['other_b']:.3f}" for p in pairs]
    if result.get("repeat_runs_unfaithful"):
        kept = "left out" if result["faithful_only"] else "kept"
        lines.append(f"Repeated runs the fidelity verdict calls unfaithful ({kept}): " + ", ".join(
            f"{v} {n}" for v, n in result["repeat_runs_unfaithful"].items()) + ".")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--emulation", required=True, help="the emulation's suite folder, two or more seeds per pair")
    p.add_argument("--twin", help="the twin's suite folder")
    p.add_argument("--repeat", help="a suite folder of emulation runs made again (same seeds)")
    p.add_argument("--variants", help="comma-separated (default: every variant in --emulation)")
    p.add_argument("--faithful-only", action="store_true",
                   help="leave out emulation runs the fidelity verdict calls unfaithful")
    p.add_argument("--md", metavar="FILE", help="also write the table as Markdown")
    args = p.parse_args(argv)
    for name in ("emulation", "twin", "repeat"):
        folder = getattr(args, name)
        if folder and not os.path.isdir(folder):
            sys.stderr.write(f"agreement_floor.py: --{name}: no folder {folder}\n")
            return 2
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else None
    result = agreement(args.emulation, args.twin, args.repeat, variants, args.faithful_only)
    if not result["variants"]:
        sys.stderr.write(f"agreement_floor.py: no pair in {args.emulation} has two completed runs\n")
        return 2
    print(json.dumps(result, indent=2))
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
