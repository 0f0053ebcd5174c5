#!/usr/bin/env python3
"""How well the emulation agrees with itself, judged by the bands the twin is judged by; JSON on stdout.

Question: How close can any model come to the emulation: how well does one emulation run agree with its own seeds'
mean, judged by the twin's bands?
Answer: About as often as the twin: one run against the other seeds' mean passes (cluster within ±0.03, every job
within ±0.05) 25-27 of 30 trials for ecmp, crux, crux-contiguous and flux and 24 for bytescheduler, the twin on the
same trials 24-27 and 21; four of the twin's nine misses are on pairs where one emulation run misses by as much.
Cited in: docs/twin-log.md, The emulation against itself; docs/findings.md, The twin against the emulation.

    python research/agreement_floor.py --emulation results/suite/emulation --twin results/suite/fluid \\
        --repeat results/suite/emulation-repeat-s1 --md results/suite/emulation-repeat-s1/agreement.md

docs/twin-log.md holds the twin to the emulation's mean over its seeds: the cluster within ±0.03 and every job
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
import sys

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


from analysis.agreement import agreement


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
