#!/usr/bin/env python3
"""The scenario suite: every scenario of workloads/scenarios/suite/ under every scheduler, with its bound.

    python scripts/suite.py --engine fluid --seeds 1-3 --out results/suite/fluid
    sudo python scripts/suite.py --engine emulation --seeds 1 --out results/suite/emulation
    python scripts/suite.py --out results/suite/emulation --collect-only
    sudo python scripts/suite.py --engine emulation --transport lossless --out results/suite/emulation-lossless
    python scripts/suite.py --engine fluid --twin-set progress_weight=2 --out /tmp/suite-progress-weight-2

Each (scenario, scheduler) pair is one resumable ``scripts/sweep.py`` folder, ``<out>/<scenario>/<variant>/``;
rerunning the command skips what is done. Every scenario runs at 5 Mbit/s (the capacity docs/fidelity.md found
for 16 hosts; ``--rate`` another, in its own folder) on the fabric its file header names (``FABRIC`` below).
The variants are the four schedulers plus Crux with the old contiguous compression (``crux-contiguous``), Crux
with the earlier single-job k_j (``crux-overlap``), Flux v1 (``flux-v1``), and Flux v2 with its job bands forced
(``flux-jobs``: Crux's order plus steals, also where jobs are equally intensive) and ordered by contended
capacity (``flux-contended``: ``order=contended``; ``flux-in-place`` and ``flux-shared``: its priced jobs
reordered among Crux's places, priced on every link or on the fabric's only).

The bound of a scenario (``scripts/bounds.py``: each job alone on the same hosts and time scale) is computed in
the fluid engine with its calibrated model, whatever engine the runs use: it is cheap and needs no root, and the
twin's cross-validation (docs/twin-log.md) says how far it is from the emulation. Output: ``<out>/suite.csv`` (one
row per scenario and variant: mean, min and max cluster GPU utilisation over the completed runs, runs, unfaithful
runs, TCP timeouts, switch drops and Flux's steals per run, U/U_bound, and the fraction of the attainable gain
(U - U_ecmp) / (U_bound - U_ecmp)),
``<out>/suite.md`` (the same as a table), ``<out>/suite.png`` and a JSON summary on stdout.
Exit codes: 0 every run completed, 1 some failed, 2 bad input, 130 interrupted.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from typing import List, Optional, Sequence


import numpy as np

from analysis.agreement import CLUSTER_BAND, JOB_BAND, RANK_MARGIN, discordant_pairs
from analysis.suite import (DEFAULT_RATE, SUITE_DIR, VARIANTS, fabric_flags, job_means, job_values, means,
                            scenario_names, variant_folder, variant_spec)
from cli import bounds as bounds_script
from core.transport import DEFAULT_PROFILE, PROFILES
from experiment.results import CLUSTER, SUMMARY_CSV, discover_runs, read_summary_csv
from experiment.results import collect as collect_sweep

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SWEEP = [sys.executable, os.path.join(PROJECT_DIR, "scripts", "sweep.py")]


def run_variant(engine: str, scenario: str, variant: str, seeds: str, out: str, dry_run: bool,
                transport: str = DEFAULT_PROFILE, twin_set: Sequence[str] = (), rate: float = DEFAULT_RATE,
                min_packets: Optional[float] = None) -> int:
    scheduler, axes = variant_spec(variant)
    extra = ["--engine", engine] + fabric_flags(scenario, rate, min_packets)
    if transport != DEFAULT_PROFILE:  # the default stays implicit, so that existing sweep folders resume as they are
        extra += ["--transport", transport]
    for term in twin_set:
        extra += ["--twin-set", term]
    cmd = SWEEP + ["--schedulers", scheduler, "--scenarios", os.path.join(SUITE_DIR, scenario + ".yaml"),
                   "--seeds", seeds, "--out", out, "--extra-args=" + " ".join(extra)]
    for axis in axes:
        cmd += ["--set", axis]
    if dry_run:
        cmd.append("--dry-run")
    return subprocess.run(cmd, stdout=sys.stderr).returncode  # stdout is for the JSON summary


def scenario_bound(scenario: str, out: str, rate: float = DEFAULT_RATE,
                   min_packets: Optional[float] = None) -> Optional[dict]:
    """The scenario's bound (fluid engine, calibrated model), cached in <out>/<scenario>/bounds.json."""
    path = os.path.join(out, scenario, "bounds.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        if "cluster_u_capacity_bound" not in result:
            # A cache from before the capacity-aware bound: add it from its solo figures (no runs needed).
            result = bounds_script.with_capacity(result, os.path.join(SUITE_DIR, scenario + ".yaml"))
            with open(path, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2)
        return result
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = bounds_script.main(["--scenario", os.path.join(SUITE_DIR, scenario + ".yaml"), "--engine", "fluid",
                                   "--", *fabric_flags(scenario, rate, min_packets)])
    if code != 0:
        return None
    result = json.loads(buf.getvalue())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return result


def variant_figures(folder: str) -> dict:
    """Cluster utilisation, and where the time went (TCP timeouts, packets the switches dropped, Flux's steals),
    over the completed runs of one sweep folder. Drops exist only in the emulation (tc counters).

    Read from the folder's summary.csv, rebuilt first from its run folders when they are here: a clone of the
    repository keeps the tables (run folders stay out of it) and can still be tabulated."""
    path = os.path.join(folder, SUMMARY_CSV)
    if not os.path.isdir(folder):
        return {"runs": 0}
    records, _ = discover_runs(folder)
    if any(record.summary is not None for record in records):
        collect_sweep(folder)
    if not os.path.exists(path):
        return {"runs": 0}
    rows, _ = read_summary_csv(path)
    utils, timeouts, drops, steals, unfaithful, failed = [], [], [], [], 0, 0
    for row in rows:
        if row.get("job") != CLUSTER:
            continue
        if row.get("ok") != "True" or not row.get("gpu_utilization"):
            failed += 1
            continue
        utils.append(float(row["gpu_utilization"]))
        for name, values in (("timeouts", timeouts), ("drops", drops), ("steals", steals)):
            if row.get(name):
                values.append(float(row[name]))
        if row.get("faithful") == "False":
            unfaithful += 1
    if not utils:
        return {"runs": 0, "failed": failed}

    def mean(values):
        return float(np.mean(values)) if values else None
    return {"runs": len(utils), "failed": failed, "unfaithful": unfaithful, "u_mean": float(np.mean(utils)),
            "u_min": float(np.min(utils)), "u_max": float(np.max(utils)),
            "timeouts_per_run": mean(timeouts), "drops_per_run": mean(drops), "steals_per_run": mean(steals)}


def collect(out: str, scenarios: List[str], variants: List[str], rate: float = DEFAULT_RATE,
            min_packets: Optional[float] = None) -> List[dict]:
    rows = []
    for scenario in scenarios:
        bound = scenario_bound(scenario, out, rate, min_packets) or {}
        u_bound = bound.get("cluster_u_bound")
        u_capacity = bound.get("cluster_u_capacity_bound")
        figures = {v: variant_figures(os.path.join(out, scenario, variant_folder(v))) for v in variants}
        u_ecmp = figures.get("ecmp", {}).get("u_mean")
        for variant in variants:
            f = figures[variant]
            row = {"scenario": scenario, "variant": variant, "u_bound": u_bound, "u_capacity_bound": u_capacity, **f}
            u = f.get("u_mean")
            if u is not None and u_capacity:
                row["of_capacity_bound"] = u / u_capacity
            if u is not None and u_bound:
                row["of_bound"] = u / u_bound
                if u_ecmp is not None and u_bound > u_ecmp:
                    row["gain_fraction"] = (u - u_ecmp) / (u_bound - u_ecmp)
            rows.append(row)
    return rows


COLUMNS = ["scenario", "variant", "runs", "failed", "unfaithful", "u_mean", "u_min", "u_max", "u_bound", "of_bound",
           "u_capacity_bound", "of_capacity_bound", "gain_fraction", "timeouts_per_run", "drops_per_run",
           "steals_per_run"]


def write_outputs(out: str, rows: List[dict], engine: str) -> None:
    with open(os.path.join(out, "suite.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)

    def cell(v):
        return "" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    with open(os.path.join(out, "suite.md"), "w", encoding="utf-8") as f:
        f.write(f"Engine: {engine}. u_* = cluster GPU utilisation over the completed runs; u_bound = each job alone "
                f"(fluid engine, calibrated); u_capacity_bound = the jobs together within every cut's capacity, each "
                f"at most its solo bound (analysis/bounds.py); gain_fraction = (U - U_ecmp) / (U_bound - U_ecmp).\n\n")
        f.write("\n".join(wide_table(rows)) + "\n\n")
        f.write("\n".join(lines) + "\n")
    plot(out, rows, engine)


def wide_table(rows: List[dict]) -> List[str]:
    """One line per scenario: the bound, each variant's mean (runs), and flux over the best Crux variant."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    lines = ["| scenario | bound (solo) | bound (capacity) | " + " | ".join(variants) + " | flux / best crux |",
             "|---|---|---|" + "---|" * len(variants) + "---|"]
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        mine = {r["variant"]: r for r in rows if r["scenario"] == scenario}
        bound = next((r["u_bound"] for r in mine.values() if r.get("u_bound")), None)
        capacity = next((r["u_capacity_bound"] for r in mine.values() if r.get("u_capacity_bound")), None)
        cells = [f"{mine[v]['u_mean']:.3f} ({mine[v]['runs']})" if mine.get(v, {}).get("u_mean") is not None
                 else "" for v in variants]
        cruxes = [mine[v]["u_mean"] for v in ("crux", "crux-contiguous", "crux-overlap")
                  if mine.get(v, {}).get("u_mean")]
        flux = mine.get("flux", {}).get("u_mean")
        ratio = f"{flux / max(cruxes):.3f}" if flux and cruxes else ""
        lines.append(f"| {scenario} | " + " | ".join(f"{b:.3f}" if b else "" for b in (bound, capacity)) + " | ")
        lines[-1] += " | ".join(cells) + f" | {ratio} |"
    return lines


def plot(out: str, rows: List[dict], engine: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    width = 0.8 / max(len(variants), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(scenarios)), 4))
    for i, variant in enumerate(variants):
        xs, ys, lo, hi = [], [], [], []
        for k, scenario in enumerate(scenarios):
            r = next((r for r in rows if r["scenario"] == scenario and r["variant"] == variant), None)
            if r is None or r.get("u_mean") is None:
                continue
            xs.append(k + (i - (len(variants) - 1) / 2) * width)
            ys.append(r["u_mean"])
            lo.append(max(r["u_mean"] - r["u_min"], 0.0))   # rounding can make equal runs' spread negative
            hi.append(max(r["u_max"] - r["u_mean"], 0.0))
        ax.bar(xs, ys, width, yerr=[lo, hi], label=variant, capsize=2)
    for k, scenario in enumerate(scenarios):
        bound = next((r["u_bound"] for r in rows if r["scenario"] == scenario and r.get("u_bound")), None)
        if bound:
            ax.hlines(bound, k - 0.45, k + 0.45, colors="black", linestyles="dashed",
                      label="bound (each job alone)" if k == 0 else None)
        capacity = next((r["u_capacity_bound"] for r in rows
                         if r["scenario"] == scenario and r.get("u_capacity_bound")), None)
        if capacity:
            ax.hlines(capacity, k - 0.45, k + 0.45, colors="black", linestyles="dotted",
                      label="bound (jobs together, within the links' capacity)" if k == 0 else None)
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels(scenarios, rotation=20, ha="right")
    ax.set_ylabel("cluster GPU utilisation")
    ax.set_ylim(0.4, 1.0)
    ax.set_title(f"Scenario suite ({engine}); bars: mean, whiskers: min-max over seeds")
    ax.legend(ncol=8, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    fig.tight_layout()
    fig.savefig(os.path.join(out, "suite.png"), dpi=150)
    plt.close(fig)


def compare(out: str, rows: List[dict], other_dir: str) -> List[dict]:
    """Each row's mean utilisation beside another suite folder's (e.g. the fluid engine's beside the emulation's),
    per job as well (the job furthest off), with the other's min-max over its seeds, how many scenarios each
    variant has within CLUSTER_BAND (cluster) and JOB_BAND (every job), and whether the two rank the variants
    the same way on each scenario. Written to <out>/compare.md."""
    path = os.path.join(other_dir, "suite.csv")
    if not os.path.exists(path):
        raise ValueError(f"--compare: no suite.csv in {other_dir}")
    with open(path, newline="", encoding="utf-8") as f:
        other = {(r["scenario"], r["variant"]): r for r in csv.DictReader(f) if r.get("u_mean")}
    pairs = []
    for r in rows:
        theirs = other.get((r["scenario"], r["variant"]))
        if r.get("u_mean") is None or theirs is None:
            continue
        here, there = (os.path.join(top, r["scenario"], variant_folder(r["variant"])) for top in (out, other_dir))
        mine_values = job_values(here)
        mine_jobs = means(mine_values)
        their_jobs = job_means(there)
        job_diffs = {job: their_jobs[job] - u for job, u in mine_jobs.items() if job in their_jobs}
        worst = max(job_diffs, key=lambda j: abs(job_diffs[j])) if job_diffs else None
        # Only the fluid engine fills the column, so it comes from whichever of the two folders is the twin's.
        starvation = (means(job_values(there, "starvation_timeouts"))
                      or means(job_values(here, "starvation_timeouts")))
        pairs.append({"scenario": r["scenario"], "variant": r["variant"], "u": r["u_mean"],
                      "u_other": float(theirs["u_mean"]), "other_min": float(theirs["u_min"]),
                      "other_max": float(theirs["u_max"]), "difference": float(theirs["u_mean"]) - r["u_mean"],
                      "runs": r["runs"], "job_differences": job_diffs, "worst_job": worst,
                      "worst_job_difference": job_diffs[worst] if worst else None,
                      "worst_job_range": (min(mine_values[worst]), max(mine_values[worst])) if worst else None,
                      "jobs": {job: (u, their_jobs[job]) for job, u in mine_jobs.items() if job in their_jobs},
                      "timeouts": r.get("timeouts_per_run"), "timeouts_other": _number(theirs.get("timeouts_per_run")),
                      "starvation_timeouts": {job: starvation[job] for job in job_diffs if job in starvation}})
    lines = [f"Mean cluster GPU utilisation here ({out}) and in {other_dir} (with its min-max over seeds); "
             f"difference = other - here; worst job: the job whose mean differs most.", "",
             "| scenario | variant | runs here | here | other [min, max] | difference | worst job | job diff. | "
             "worst job here [min, max] | TCP timeouts per run, here / other |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        job_cell = f"{p['worst_job_difference']:+.3f}" if p["worst_job"] else ""
        timeouts = " / ".join("" if t is None else f"{t:.0f}" for t in (p["timeouts"], p["timeouts_other"]))
        spread = "[{:.3f}, {:.3f}]".format(*p["worst_job_range"]) if p["worst_job"] else ""
        lines.append(f"| {p['scenario']} | {p['variant']} | {p['runs']} | {p['u']:.3f} | {p['u_other']:.3f} "
                     f"[{p['other_min']:.3f}, {p['other_max']:.3f}] | {p['difference']:+.3f} | "
                     f"{p['worst_job'] or ''} | {job_cell} | {spread} | {timeouts} |")
    lines += ["", f"Agreement per variant: scenarios with the cluster within ±{CLUSTER_BAND} and with every job "
              f"within ±{JOB_BAND}, and the mean absolute difference over the scenarios (cluster, worst job).", "",
              "| variant | cluster within | every job within | mean abs. cluster | mean abs. worst job | "
              "worst job inside here's [min, max] | outside |",
              "|---|---|---|---|---|---|---|"]
    for variant in dict.fromkeys(p["variant"] for p in pairs):
        mine = [p for p in pairs if p["variant"] == variant]
        cluster_ok = [p for p in mine if abs(p["difference"]) <= CLUSTER_BAND]
        jobs_ok = [p for p in mine if p["worst_job"] and abs(p["worst_job_difference"]) <= JOB_BAND]
        outside = [f"{p['scenario']} {p['difference']:+.3f}" for p in mine if p not in cluster_ok]
        outside += [f"{p['scenario']} {p['worst_job']} {p['worst_job_difference']:+.3f}"
                    for p in mine if p["worst_job"] and p not in jobs_ok]
        worst = [abs(p["worst_job_difference"]) for p in mine if p["worst_job"]]
        # Whether the other folder's figure for the job furthest off is one that a run here gave: where the
        # runs here spread widely (a bimodal job), a mean outside the band can still be a figure they produce.
        inside = [p for p in mine if p["worst_job"]
                  and _within(p["jobs"][p["worst_job"]][1], *p["worst_job_range"])]
        lines.append(f"| {variant} | {len(cluster_ok)}/{len(mine)} | {len(jobs_ok)}/{len(mine)} | "
                     f"{sum(abs(p['difference']) for p in mine) / len(mine):.3f} | "
                     f"{sum(worst) / len(worst) if worst else float('nan'):.3f} | {len(inside)}/{len(mine)} | "
                     f"{', '.join(outside)} |")
    lines += starvation_table(pairs)
    lines += ["", "| scenario | order here | order in other | same order |", "|---|---|---|---|"]
    for scenario in dict.fromkeys(p["scenario"] for p in pairs):
        mine = [p for p in pairs if p["scenario"] == scenario]
        here = [p["variant"] for p in sorted(mine, key=lambda p: -p["u"])]
        there = [p["variant"] for p in sorted(mine, key=lambda p: -p["u_other"])]
        lines.append(f"| {scenario} | {' > '.join(here)} | {' > '.join(there)} | {'yes' if here == there else 'no'} |")
    discordant = discordant_pairs(pairs)
    lines += ["", f"Pairs of variants that the runs here separate by more than {RANK_MARGIN} and the other folder "
              f"orders the other way: {len(discordant)}.", ""]
    lines += [f"- {d['scenario']}: {d['a']} {d['u_a']:.3f} / {d['other_a']:.3f} against {d['b']} {d['u_b']:.3f} / "
              f"{d['other_b']:.3f}" for d in discordant]
    with open(os.path.join(out, "compare.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    compare_plot(out, pairs, other_dir)
    return pairs


def starvation_table(pairs: List[dict]) -> List[str]:
    """compare.md's jobs split by whether the twin's starvation rule timed them out (mean starvation timeouts per
    run above 0): how many are within JOB_BAND and the largest difference on each side, per variant and in all,
    and the jobs outside the band that the rule did not touch. Empty when neither folder has the column."""
    if not any(p["starvation_timeouts"] for p in pairs):
        return []
    lines = ["", f"Jobs by whether the twin's starvation rule timed them out (`starvation_timeouts` per run above "
             f"0, from the fluid folder's summary.csv): jobs within ±{JOB_BAND} and the largest difference.", "",
             "| variant | starved: within | mean abs. | largest | not starved: within | mean abs. | largest | "
             "not starved, outside |",
             "|---|---|---|---|---|---|---|---|"]

    def side(entries):
        within = sum(abs(d) <= JOB_BAND for _v, _s, _j, d in entries)
        if not entries:
            return "0/0", "", ""
        errors = [abs(d) for _v, _s, _j, d in entries]
        return f"{within}/{len(entries)}", f"{np.mean(errors):.3f}", f"{max(errors):.3f}"
    groups = {variant: [p for p in pairs if p["variant"] == variant]
              for variant in dict.fromkeys(p["variant"] for p in pairs)}
    groups["all"] = pairs
    for variant, mine in groups.items():
        starved, clear = [], []
        for p in mine:
            for job, d in p["job_differences"].items():
                if job in p["starvation_timeouts"]:
                    side_of_job = starved if p["starvation_timeouts"][job] > 0 else clear
                    side_of_job.append((p["variant"], p["scenario"], job, d))
        outside = ", ".join(f"{v + ' ' if variant == 'all' else ''}{s} {j} {d:+.3f}"
                            for v, s, j, d in clear if abs(d) > JOB_BAND)
        lines.append(f"| {variant} | {' | '.join(side(starved))} | {' | '.join(side(clear))} | {outside} |")
    return lines


def _within(value: float, low: float, high: float) -> bool:
    """low <= value <= high, to the table's three decimals."""
    return low - 0.0005 <= value <= high + 0.0005


def _number(text) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _merge_labels(points, near: float = 0.01) -> List[tuple]:
    """(name, variants, u, o) per group of ``points`` ((name, variant, u, o)) that share a name and lie within
    ``near`` of the group's first point on both axes: variants that agree (Crux and Flux often do) get one label
    instead of labels printed over each other."""
    groups: List[tuple] = []
    for name, variant, u, o in points:
        for g_name, g_variants, g_u, g_o in groups:
            if g_name == name and abs(g_u - u) <= near and abs(g_o - o) <= near:
                g_variants.append(variant)
                break
        else:
            groups.append((name, [variant], u, o))
    return groups


def compare_plot(out: str, pairs: List[dict], other_dir: str) -> None:
    """<out>/compare.png: the other folder's mean utilisation against this one's, per scenario and variant
    (cluster, with the ±CLUSTER_BAND band) and per job (±JOB_BAND), one colour per variant; the points outside
    their band are named."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    variants = list(dict.fromkeys(p["variant"] for p in pairs))
    colours = {v: plt.get_cmap("tab10")(i % 10) for i, v in enumerate(variants)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    panels = [("cluster", CLUSTER_BAND, [(p, p["scenario"], p["u"], p["u_other"]) for p in pairs]),
              ("every job", JOB_BAND, [(p, f"{p['scenario']} {job}", u, o)
                                       for p in pairs for job, (u, o) in p["jobs"].items()])]
    for ax, (title, band, points) in zip(axes, panels):
        values = [v for _p, _n, u, o in points for v in (u, o)] or [0.0, 1.0]
        lo, hi = max(0.0, min(values) - 0.05), min(1.0, max(values) + 0.05)
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        ax.fill_between([lo, hi], [lo - band, hi - band], [lo + band, hi + band], color="grey", alpha=0.2,
                        label=f"±{band}")
        for variant in variants:
            mine = [(u, o) for p, _n, u, o in points if p["variant"] == variant]
            ax.scatter([u for u, _o in mine], [o for _u, o in mine], s=14, color=colours[variant], label=variant)
        outside = [(n, p["variant"], u, o) for p, n, u, o in points if abs(o - u) > band]
        for name, names, u, o in _merge_labels(outside):
            ax.annotate(f"{name} ({', '.join(names)})", (u, o), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel(f"GPU utilisation, {os.path.basename(os.path.normpath(out))}")
        ax.set_ylabel(f"GPU utilisation, {os.path.basename(os.path.normpath(other_dir))}")
        ax.set_title(f"{title}: {len(points) - len(outside)} of {len(points)} within ±{band}")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "compare.png"), dpi=150)
    plt.close(fig)


def read_rows(folder: str) -> List[dict]:
    """``folder``/suite.csv as ``collect`` made it (numbers as numbers, empty cells left out)."""
    rows = []
    with open(os.path.join(folder, "suite.csv"), newline="", encoding="utf-8") as f:
        for raw in csv.DictReader(f):
            row = {}
            for key, value in raw.items():
                if value in ("", None):
                    continue
                try:
                    row[key] = int(value) if key in ("runs", "failed", "unfaithful") else float(value)
                except ValueError:
                    row[key] = value
            rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=["fluid", "emulation"], default="fluid")
    p.add_argument("--seeds", default="1", help="seeds as sweep.py takes them (1-3, 1,2)")
    p.add_argument("--scenarios", help=f"comma-separated names from {os.path.relpath(SUITE_DIR, PROJECT_DIR)} "
                                       "(default: all)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS)
                   + ", or any scheduler name (package.module:ClassName included)")
    p.add_argument("--out", help="suite folder (one sweep folder per scenario and variant)")
    p.add_argument("--table", metavar="DIR", help="print DIR's table (a line per scenario) from its suite.csv, "
                                                  "run nothing (what docs/suite.md shows)")
    p.add_argument("--collect-only", action="store_true", help="only rebuild the tables and figure")
    p.add_argument("--compare", metavar="DIR", help="another suite folder (e.g. the other engine's): write "
                                                    "<out>/compare.md with both utilisations and rankings, "
                                                    "and <out>/compare.png")
    p.add_argument("--transport", choices=list(PROFILES), default=DEFAULT_PROFILE,
                   help="the runs' transport profile (core/transport.py; default %(default)s); give each profile "
                        "its own --out")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE, metavar="MBPS",
                   help="host and fabric link rate, Mbit/s (default %(default)g, the emulator's capacity for 16 "
                        "hosts); give each rate its own --out, and the same --rate to --collect-only")
    p.add_argument("--min-packets", type=float, metavar="K",
                   help="the runs' packets budget per operation (testbed/run.py --min-packets; default: each "
                        "scenario's, 20). At another --rate the budget merges buckets differently; half the rate "
                        "with half the budget runs the same workload")
    p.add_argument("--twin-set", action="append", default=[], metavar="TERM=VALUE",
                   help="fluid engine only, repeatable: a twin model term over the calibrated model's for every run "
                        "(testbed/run.py --twin-set), e.g. to try a term on the whole suite; give it its own --out")
    p.add_argument("--dry-run", action="store_true", help="print the runner commands, run nothing")
    args = p.parse_args(argv)
    if args.table:
        try:
            rows = read_rows(args.table)
        except OSError as exc:
            sys.stderr.write(f"suite.py: --table {args.table}: {exc.strerror}\n")
            return 2
        print("\n".join(wide_table(rows)))
        return 0
    if not args.out:
        sys.stderr.write("suite.py: --out is required (or --table DIR)\n")
        return 2
    known = scenario_names()
    scenarios = args.scenarios.split(",") if args.scenarios else known
    variants = args.variants.split(",")
    bad = [s for s in scenarios if s not in known]
    for v in variants:
        try:
            variant_spec(v)
        except ValueError as exc:  # neither a variant nor a scheduler the runner takes
            sys.stderr.write(f"suite.py: unknown scenario or variant: {v} (variants: {', '.join(VARIANTS)}; "
                             f"or a scheduler: {exc})\n")
            return 2
    if bad:
        sys.stderr.write(f"suite.py: unknown scenario or variant: {', '.join(bad)}\n")
        return 2
    if args.min_packets is not None and not args.min_packets >= 0:
        sys.stderr.write(f"suite.py: --min-packets must be 0 or more (got {args.min_packets:g})\n")
        return 2
    if not args.rate > 0:
        sys.stderr.write(f"suite.py: --rate must be above 0 (got {args.rate:g})\n")
        return 2
    if args.twin_set and args.engine != "fluid":
        sys.stderr.write("suite.py: --twin-set is for --engine fluid\n")
        return 2
    if args.twin_set:
        from twin.model import parse_model_overrides
        try:
            parse_model_overrides(args.twin_set)
        except ValueError as exc:
            sys.stderr.write(f"suite.py: --twin-set: {exc}\n")
            return 2
    if args.engine == "emulation" and not args.collect_only and not args.dry_run and os.geteuid() != 0:
        sys.stderr.write("suite.py: --engine emulation must run as root\n")
        return 2
    failed = 0
    if not args.collect_only:
        for scenario in scenarios:
            for variant in variants:
                sys.stderr.write(f"suite: {scenario} / {variant}\n")
                code = run_variant(args.engine, scenario, variant, args.seeds,
                                   os.path.join(args.out, scenario, variant_folder(variant)), args.dry_run,
                                   args.transport, args.twin_set, args.rate, args.min_packets)
                if code == 130:
                    return 130
                if code == 2:
                    return 2
                failed += code != 0
    if args.dry_run:
        return 0
    os.makedirs(args.out, exist_ok=True)
    rows = collect(args.out, scenarios, variants, args.rate, args.min_packets)
    write_outputs(args.out, rows, args.engine)
    result = {"engine": args.engine, "out": args.out, "rows": rows}
    if args.compare:
        try:
            result["compare"] = compare(args.out, rows, args.compare)
        except ValueError as exc:
            sys.stderr.write(f"suite.py: {exc}\n")
            return 2
    print(json.dumps(result, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
