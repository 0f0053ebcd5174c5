#!/usr/bin/env python3
"""Fit the twin's artefact terms on finished ECMP emulation runs, and write twin/calibrated.json.

Question: Which values of the twin's artefact terms make its replay of finished ECMP emulation runs agree with
them?
Answer: step_latency_s 0.001 (from the jobs alone), one timeout per ring step through a FIFO holding under 1.5
packets per flow, and queue_backlog 0.5, at an RMSE of 0.028 per job; written to twin/calibrated.json.
Cited in: docs/twin-log.md, Calibration; docs/suite.md, Results: the flow-level twin (3 seeds); docs/twin.md.

    python research/fit_twin.py results/suite/emulation results/twin/solo [--out twin/calibrated.json]

Only ECMP runs are used (every flow in class 0 on a hashed path): whatever the fit absorbs is then about TCP and
the emulator, not about a policy, and the twin's agreement on the other policies stays a prediction. Each run
folder's config.json (or the copy in summary.json) gives the scenario, the fabric and the seed; the twin replays
the run on the switches' own ECMP paths (Open vSwitch's hash, twin/network.py). ``goodput`` (0.956, measured by
bench/fabric.py), ``rto_s`` (Linux's minimum retransmission timeout, 0.2 s) and ``priority_hol_packets``
(2.5, with ``priority_hol_min_packets`` 0.7 and ``priority_hol_floor_packets`` 0.2, measured by
bench/priority_share.py; they have no effect under ECMP, whose flows share one class) are physical and not
fitted. The other terms are fitted in three stages, each on the runs and the observable that carry it:

1. ``step_latency_s`` on the runs of one job alone (``scripts/bounds.py --engine emulation --schedulers ecmp
   --keep DIR``), against the per-job GPU utilisation: nothing else is on the links, so neither queueing behind
   another job nor an overflowing FIFO can stand in for it;
2. ``overflow_timeouts`` and ``fifo_flow_packets`` on the runs of several jobs, against the TCP retransmission
   timeouts each run counted (``fidelity.tcp.timeouts``; the error is taken on square roots, as for counts):
   where FIFOs overflow, and how often that ends in a timeout;
3. ``queue_delay_s`` and ``queue_backlog`` together on the runs of several jobs, against the per-job GPU
   utilisation, with the terms above (a fixed delay per step that meets another job in its FIFO, and a wait in
   proportion to what the FIFO holds ahead of it: the fit says which, or how much of each);
4. with ``--fit-sharing`` only, ``share_cv`` on the same runs, against each job's utilisation averaged over its
   scenario's seeds (the twin replays each run with its own seed, so the drawn shares differ from run to run; a
   model with noise is judged by its mean, as the emulation is): how far the steps that share a FIFO get unequal
   shares. Not part of the calibration: what it gains on ECMP under ``tcp`` it does not keep on the other
   policies or under ``lossless`` (docs/twin-log.md);
5. with ``--fit-noise`` only, ``step_latency_cv`` on the same runs, against how much each job's utilisation
   varies over the seeds of one scenario (its standard deviation, for every scenario run with two seeds or more).
   Not part of the calibration: on the suite's ECMP runs the error is flat (docs/twin-log.md), so a fitted value
   would be noise.

Without runs of a job alone, stage 1 is skipped and stage 3 fits the step latency too. ``--jobs`` spreads each
grid over processes. Prints the fit as JSON.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import itertools
import json
import os
import statistics
import sys
import time

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


from experiment.results import RunFolder
import twin
from twin.model import CALIBRATED_FILE, DEFAULT_CALIBRATION, IDEAL

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOLO_STEP_LATENCY_S = tuple(k / 1000 for k in range(9))      # stage 1: 0 to 8 ms
OVERFLOW_TIMEOUTS = (0.25, 0.5, 1.0, 2.0, 4.0)                # stage 2
FIFO_FLOW_PACKETS = (1.0, 1.25, 1.5, 2.0, 3.0)
QUEUE_DELAY_S = (0.0, 0.005, 0.01, 0.02)                     # stage 3
QUEUE_BACKLOG = (0.0, 0.25, 0.5, 0.75, 1.0)
STEP_LATENCY_S = (0.0, 0.002, 0.004, 0.006)                   # stage 3, without runs of a job alone
SHARE_CV = (0.0, 0.3, 0.5, 0.6, 0.75, 1.0)                     # stage 4
STEP_LATENCY_CV = (0.0, 0.5, 1.0, 2.0, 4.0)                   # stage 5


def ecmp_runs(folders):
    """(run folder, summary) of every finished ECMP emulation run under the given folders."""
    out = []
    for top in folders:
        for root, _dirs, files in os.walk(top):
            if "summary.json" not in files:
                continue
            summary = RunFolder(root).summary()
            if summary and summary.ok and summary.engine == "emulation" and summary.config.get("scheduler") == "ecmp":
                out.append((RunFolder(root), summary))
    return sorted(out, key=lambda x: x[0].path)


def replay(summary, params, ring_model="auto", seed_offset=0):
    """The twin's per-job utilisation and its retransmission timeouts for one recorded run under ``params``, with
    the run's seed plus ``seed_offset`` (the model's noise draws)."""
    jobs, r = twin.replay_recorded(summary.config, params, scheduler="ecmp",
                                   seed=int(summary.seed or 1) + seed_offset, ring_model=ring_model)
    return {j["name"]: j["gpu_utilization"] for j in twin.summarize(jobs, r)["jobs"]}, sum(r.timeouts.values())


FIXED = {name: DEFAULT_CALIBRATION[name] for name in ("goodput", "rto_s", "rto_backoff", "priority_hol_packets",
                                                      "priority_hol_min_packets", "priority_hol_floor_packets",
                                                      "fifo_flow_rate_mbps")}
_RUNS = {}


def errors(point, paths, ring_model="auto", seed_offset=0) -> dict:
    """Root mean squared errors over the runs at ``paths`` for one combination of the fitted terms: of the per-job
    utilisation, and of the square root of each run's timeouts (a process of the pool loads the runs once)."""
    key = tuple(paths)
    if key not in _RUNS:
        _RUNS[key] = [RunFolder(path).summary() for path in paths]
    params = IDEAL.with_(**FIXED, **point)
    util_err, jobs, timeout_err = 0.0, 0, 0.0
    by_condition = collections.defaultdict(lambda: collections.defaultdict(list))  # what the seeds vary
    for summary in _RUNS[key]:
        utils, timeouts = replay(summary, params, ring_model, seed_offset)
        for job in summary.jobs:
            util_err += (utils[job.name] - job.gpu_utilization) ** 2
            jobs += 1
            by_condition[condition(summary)][job.name].append((utils[job.name], job.gpu_utilization))
        measured = ((summary.fidelity or {}).get("tcp") or {}).get("timeouts") or 0
        timeout_err += (timeouts ** 0.5 - measured ** 0.5) ** 2
    spread_err = [(statistics.pstdev(t for t, _ in pairs) - statistics.pstdev(e for _, e in pairs)) ** 2
                  for per_job in by_condition.values() for pairs in per_job.values() if len(pairs) > 1]
    mean_err = [(statistics.fmean(t for t, _ in pairs) - statistics.fmean(e for _, e in pairs)) ** 2
                for per_job in by_condition.values() for pairs in per_job.values()]
    return {"rmse": (util_err / jobs) ** 0.5, "rmse_sqrt_timeouts": (timeout_err / len(_RUNS[key])) ** 0.5,
            "rmse_seed_spread": (sum(spread_err) / len(spread_err)) ** 0.5 if spread_err else None,
            "rmse_seed_mean": (sum(mean_err) / len(mean_err)) ** 0.5}


def condition(summary) -> str:
    """What a run's results depend on apart from its seed: the scenario, the fabric and the transport."""
    cfg = summary.config
    return json.dumps([cfg.get(k) for k in ("scenario", "fabric", "transport", "queue_ms", "class_floor",
                                            "class_mode")], sort_keys=True)


def search(pool, points, runs, objective, ring_model, seed_offset=0):
    """One stage: every point of its grid with its errors over ``runs``, and the point minimising ``objective``."""
    paths = [f.path for f, _s in runs]
    found = pool.map(errors, points, itertools.repeat(paths), itertools.repeat(ring_model),
                     itertools.repeat(seed_offset))
    grid = [dict(point, **errs) for point, errs in zip(points, found)]
    best = min(grid, key=lambda g: g[objective])
    return {"runs": [rel(f) for f, _s in runs], "objective": objective, "best": best, "grid": grid}


def seeds_per_condition(runs) -> dict:
    out = collections.defaultdict(set)
    for _folder, summary in runs:
        out[condition(summary)].add(summary.seed)
    return out


def rel(folder) -> str:
    return os.path.relpath(folder.path, PROJECT_DIR)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="folders holding finished emulation runs (searched recursively)")
    p.add_argument("--out", default=CALIBRATED_FILE, help="where to write the fitted terms")
    p.add_argument("--ring-model", default="auto", choices=("auto", "steps", "pipelined"))
    p.add_argument("--fit-sharing", action="store_true",
                   help="also fit share_cv on the seeds' mean utilisation (stage 4; not part of the calibration)")
    p.add_argument("--fit-noise", action="store_true",
                   help="also fit step_latency_cv on the seeds' spread (stage 5; not part of the calibration)")
    p.add_argument("--seed-offset", type=int, default=0, metavar="N",
                   help="replay each run with its seed plus N: another set of the model's noise draws (stages 4-5)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per CPU)")
    args = p.parse_args(argv)
    if args.seed_offset < 0:
        sys.stderr.write(f"fit_twin.py: --seed-offset must be >= 0 (got {args.seed_offset})\n")
        return 2
    runs = ecmp_runs(args.folders)
    if not runs:
        sys.stderr.write("fit_twin.py: no finished ECMP emulation runs found\n")
        return 2
    t0 = time.time()
    solo = [(f, s) for f, s in runs if len(s.jobs) == 1]
    shared = [(f, s) for f, s in runs if len(s.jobs) > 1]
    if not shared:
        sys.stderr.write("fit_twin.py: no finished ECMP emulation run of several jobs found\n")
        return 2
    fitted = {"step_latency_s": 0.0, "queue_delay_s": 0.0, "queue_backlog": 0.0, "overflow_timeouts": 0.0,
              "fifo_flow_packets": IDEAL.fifo_flow_packets, "share_cv": 0.0, "step_latency_cv": 0.0}
    stages = []

    def stage(names, values, runs, objective):
        points = [dict(fitted, **dict(zip(names, combo))) for combo in itertools.product(*values)]
        result = search(pool, points, runs, objective, args.ring_model, args.seed_offset)
        fitted.update({name: result["best"][name] for name in names})
        stages.append(dict(result, fits=list(names)))

    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        if solo:
            stage(["step_latency_s"], [SOLO_STEP_LATENCY_S], solo, "rmse")
        stage(["overflow_timeouts", "fifo_flow_packets"], [OVERFLOW_TIMEOUTS, FIFO_FLOW_PACKETS], shared,
              "rmse_sqrt_timeouts")
        if solo:
            stage(["queue_delay_s", "queue_backlog"], [QUEUE_DELAY_S, QUEUE_BACKLOG], shared, "rmse")
        else:
            stage(["step_latency_s", "queue_delay_s", "queue_backlog"], [STEP_LATENCY_S, QUEUE_DELAY_S, QUEUE_BACKLOG],
                  shared, "rmse")
        if args.fit_sharing:
            stage(["share_cv"], [SHARE_CV], shared, "rmse_seed_mean")
        if args.fit_noise:
            if not any(len(seeds) > 1 for seeds in seeds_per_condition(shared).values()):
                sys.stderr.write("fit_twin.py: --fit-noise needs a scenario run with two seeds or more\n")
                return 2
            stage(["step_latency_cv"], [STEP_LATENCY_CV], shared, "rmse_seed_spread")
    best = stages[-1]["best"]
    fit = {"params": dict(FIXED, **fitted),
           "rmse_per_job": best["rmse"], "rmse_per_job_seed_mean": best["rmse_seed_mean"],
           "rmse_sqrt_timeouts_per_run": best["rmse_sqrt_timeouts"],
           "rmse_seed_spread_per_job": best["rmse_seed_spread"],
           "ring_model": args.ring_model, "stages": stages, "fit_wall_s": time.time() - t0,
           "command": " ".join(["research/fit_twin.py"] + (argv if argv is not None else sys.argv[1:]))}
    with open(args.out, "w") as f:
        json.dump(fit, f, indent=2)
    print(json.dumps(dict(fit, stages=[{k: v for k, v in st.items() if k not in ("grid", "runs")}
                                       for st in fit["stages"]]), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
