#!/usr/bin/env python3
"""The twin's starvation terms on a grid, each setting's fluid suite judged against the emulation's suite.

Question: Could any combination of the twin's starvation terms (starve_share, rto_backoff, starve_backoff_flows,
rto_rttvar) agree better with the emulation on the runs that starve?
Answer: No: none of the 16 settings passes more than the calibrated one's 33 of 42 scenarios, and six pairs are
outside the bands in every one.
Cited in: docs/twin-log.md, The starvation terms on a grid, judged on the runs that starve; docs/findings.md, The
twin against the emulation.

    python research/starvation_grid.py --out results/twin/starvation-grid
    python research/starvation_grid.py --grid starve_share=0.02,0.01 --grid rto_backoff=1,0 --jobs 2 --out DIR

The calibrated model fits its terms on ECMP runs only, so that its agreement on the other policies is a
prediction. ECMP never starves a class, so the terms that decide a starved flow's fate under strict priority
(``starve_share``, ``rto_backoff``, ``starve_backoff_flows``, ``rto_rttvar``; twin/model.py) cannot be fitted
there: they come from benchmarks. This script asks the other question, as a diagnostic and not a calibration:
over a grid of those terms, judged on the very runs of the policies that starve (the scenarios of the suite,
every variant given), how close can the model's form come? For each setting it runs the fluid suite at one seed
(the twin's seeds agree exactly under Open vSwitch's hash) in ``<out>/<setting>/`` with ``scripts/suite.py
--twin-set`` (resumable: a setting already run is only judged again) and judges it with
``research/agreement_floor.py``'s bands against the emulation's mean over its seeds: scenarios with the cluster
within ±0.03 and every job within ±0.05 per variant, mean absolute differences, the pairs of variants ordered the
other way, and the misses. Output: ``<out>/grid.json`` and ``<out>/grid.md``, the settings best first (most
scenarios within both bands, then the smallest mean absolute difference of the job furthest off).

A setting that meets the bands everywhere here would still be a fit on the judged runs; one that does not shows
that no value of these terms does, whatever benchmark it came from.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


from analysis.agreement import agreement
from analysis.suite import VARIANTS
from twin.model import ModelParams

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The terms a starved flow's cost depends on, and the values the benchmarks and tries in docs/twin-log.md gave.
DEFAULT_GRID = {"starve_share": [0.02, 0.005],
                "rto_backoff": [1.0, 0.0],
                "starve_backoff_flows": [1, 2],
                "rto_rttvar": [0.0, 2.5]}
#: The policies that keep their classes and starve some of them (ECMP starves none: these terms do not move it).
DEFAULT_VARIANTS = "bytescheduler,crux,crux-contiguous,flux,crux-overlap"

Setting = Tuple[Tuple[str, str], ...]


class BadInput(Exception):
    pass


def parse_grid(items: List[str]) -> Dict[str, List[str]]:
    """--grid TERM=V1,V2 ... into {term: [values]}; the terms must be the model's."""
    known = set(ModelParams.__dataclass_fields__)
    grid: Dict[str, List[str]] = {}
    for item in items:
        term, sep, values = item.partition("=")
        term = term.strip()
        if not sep or not values.strip():
            raise BadInput(f"--grid {item!r}: expected TERM=V1,V2")
        if term not in known:
            raise BadInput(f"--grid {item!r}: {term!r} is not a twin model term (twin/model.py)")
        try:
            parsed = [v.strip() for v in values.split(",") if v.strip()]
            [float(v) for v in parsed]
        except ValueError:
            raise BadInput(f"--grid {item!r}: values must be numbers")
        if not parsed:
            raise BadInput(f"--grid {item!r}: expected TERM=V1,V2")
        grid[term] = parsed
    return grid


def settings(grid: Dict[str, List[str]]) -> List[Setting]:
    terms = sorted(grid)
    return [tuple(zip(terms, values)) for values in itertools.product(*(grid[t] for t in terms))]


def setting_name(setting: Setting) -> str:
    return "__".join(f"{term}-{value}" for term, value in setting)


def run_suite(setting: Setting, out: str, variants: str, scenarios: str) -> Tuple[Setting, float, int]:
    """One setting's fluid suite (scripts/suite.py resumes what is done); wall time and exit code."""
    folder = os.path.join(out, setting_name(setting))
    cmd = [sys.executable, os.path.join(PROJECT_DIR, "scripts", "suite.py"), "--engine", "fluid", "--seeds", "1",
           "--variants", variants, "--out", folder]
    if scenarios:
        cmd += ["--scenarios", scenarios]
    for term, value in setting:
        cmd += ["--twin-set", f"{term}={value}"]
    started = time.monotonic()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "suite.log"), "w", encoding="utf-8") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_DIR)
    return setting, time.monotonic() - started, rc


def score(setting: Setting, out: str, emulation: str, variants: List[str]) -> dict:
    result = agreement(emulation, os.path.join(out, setting_name(setting)), None, variants)
    per_variant = {v: k["twin"] for v, k in result["variants"].items() if "twin" in k}
    return {"setting": dict(setting), "folder": setting_name(setting),
            "both_within": sum(t["both_within"] for t in per_variant.values()),
            "trials": sum(t["trials"] for t in per_variant.values()),
            "mean_abs_cluster": sum(t["mean_abs_cluster"] for t in per_variant.values()) / len(per_variant),
            "mean_abs_worst_job": sum(t["mean_abs_worst_job"] for t in per_variant.values()) / len(per_variant),
            "discordant_pairs": result["discordant_pairs"].get("twin", 0),
            "variants": per_variant,
            "misses": [{k: m[k] for k in ("scenario", "variant", "cluster", "worst_job")}
                       for m in result["twin_misses"]]}


def markdown(rows: List[dict], emulation: str, variants: List[str]) -> str:
    lines = [f"The twin's starvation terms on a grid (research/starvation_grid.py), each setting's fluid suite "
             f"(seed 1) against the emulation's mean over its seeds ({emulation}): scenarios with the cluster "
             "within ±0.03 and every job within ±0.05, per variant; mean absolute differences over the variants "
             "(cluster / the job furthest off); pairs of variants the emulation separates by more than 0.01 and the "
             "twin orders the other way, among these variants. Best first.", "",
             "| setting | within, all | " + " | ".join(variants) + " | mean abs. | pairs reversed | misses |",
             "|---|---|" + "---|" * len(variants) + "---|---|---|"]
    for r in rows:
        cells = [f"{r['variants'][v]['both_within']}/{r['variants'][v]['trials']}" if v in r["variants"] else ""
                 for v in variants]
        misses = ", ".join(f"{m['variant']} {m['scenario']} {m['cluster']:+.3f}/{m['worst_job']:.3f}"
                           for m in r["misses"])
        setting = ", ".join(f"{k} {v}" for k, v in r["setting"].items())
        lines.append(f"| {setting} | {r['both_within']}/{r['trials']} | " + " | ".join(cells) +
                     f" | {r['mean_abs_cluster']:.3f} / {r['mean_abs_worst_job']:.3f} | {r['discordant_pairs']} | "
                     f"{misses} |")
    lines += ["", "A miss: variant, scenario, the cluster's difference / the largest absolute difference of a job "
              "(twin minus emulation)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="grid folder: one fluid suite folder per setting, grid.json, "
                   "grid.md")
    p.add_argument("--emulation", default="results/suite/emulation",
                   help="the emulation's suite folder (default: results/suite/emulation)")
    p.add_argument("--grid", action="append", default=[], metavar="TERM=V1,V2",
                   help="repeatable: a model term and its values (default: "
                   + "; ".join(f"{t}={','.join(map(str, v))}" for t, v in DEFAULT_GRID.items()) + ")")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma-separated (default: {DEFAULT_VARIANTS})")
    p.add_argument("--scenarios", default="", help="comma-separated suite scenarios (default: all)")
    p.add_argument("--jobs", type=int, default=1, help="settings run at once (one core each; default 1)")
    args = p.parse_args(argv)
    try:
        grid = parse_grid(args.grid) if args.grid else {t: [str(v) for v in vs] for t, vs in DEFAULT_GRID.items()}
        if args.jobs < 1:
            raise BadInput("--jobs: at least 1")
        if not os.path.isdir(args.emulation):
            raise BadInput(f"--emulation: no folder {args.emulation}")
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown or not variants:
            raise BadInput(f"--variants: unknown {', '.join(unknown) or '(none given)'}; from {', '.join(VARIANTS)}")
    except BadInput as exc:
        sys.stderr.write(f"starvation_grid.py: {exc}\n")
        return 2
    todo = settings(grid)
    print(f"{len(todo)} settings, {args.jobs} at a time, into {args.out}", flush=True)
    failed = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = pool.map(lambda s: run_suite(s, args.out, ",".join(variants), args.scenarios), todo)
        for n, (setting, wall, rc) in enumerate(runs, 1):
            state = "done" if rc == 0 else f"failed (exit {rc}, {setting_name(setting)}/suite.log)"
            print(f"[{n}/{len(todo)}] {setting_name(setting)}: {state} in {wall:.0f} s", flush=True)
            if rc != 0:
                failed.append(setting_name(setting))
    rows = [score(s, args.out, args.emulation, variants) for s in todo if setting_name(s) not in failed]
    rows.sort(key=lambda r: (-r["both_within"], r["mean_abs_worst_job"]))
    with open(os.path.join(args.out, "grid.json"), "w", encoding="utf-8") as f:
        json.dump({"command": " ".join([os.path.relpath(sys.argv[0], PROJECT_DIR)] + sys.argv[1:]),
                   "emulation": args.emulation, "grid": grid, "variants": variants, "failed": failed,
                   "settings": rows}, f, indent=2)
    with open(os.path.join(args.out, "grid.md"), "w", encoding="utf-8") as f:
        f.write(markdown(rows, args.emulation, variants))
    print(json.dumps([{"setting": r["setting"], "both_within": r["both_within"], "trials": r["trials"],
                       "mean_abs_worst_job": round(r["mean_abs_worst_job"], 4),
                       "discordant_pairs": r["discordant_pairs"]} for r in rows], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
