#!/usr/bin/env python3
"""Where an emulation run's time went, operation by operation, beside the twin replaying the same run.

Question: Where does an emulation run's time go, operation by operation, against the twin's replay of the same run?
Answer: Into launch skew and late ranks the twin does not have: ByteScheduler's vgg-gpt2 runs carry 1.0-1.7 s of
skew (the twin none) and 3-5 operations whose ranks finish 0.5 s or more apart, held up by rare connections and TCP
timers.
Cited in: docs/twin-log.md, Operation by operation; docs/findings.md, The twin against the emulation.

    python research/op_timeline.py RUN_DIR [--job gpt2_xl] [--late 0.5] [--out FILE.json]

RUN_DIR is an emulation run folder (testbed/run.py) with its workers' logs (``workers/*.jsonl``). The twin replays
the run's recorded config (its jobs as placed, scheduler, classes, FIFOs, seed) with the calibrated model and logs
every rank's launch and done of every operation; the emulation's come from the workers' ``op`` records. For each
job, iteration and bucket:

* ``emulation_s`` / ``twin_s``: the operation's time, from its first rank's launch to its last rank's done (what
  ``op_time_by_bucket_s`` averages in either engine's ``summary.json``), in two parts:
* ``skew_s``: from the first rank's launch to the last one's (a rank still waiting for an earlier operation
  launches late, and the ring waits for it), and ``after_launch_s``: from the last launch to the last done;
* ``spread_s``: from the first rank's done to the last one's. A ring's ranks finish within a step of each other
  unless one connection was held up at the end; ``late``: ``spread_s`` >= ``--late`` in the emulation;
* ``delivery_s``: in the emulation, the longest time a rank waited, from the moment its ring predecessor handed
  its last message to the kernel to the rank's done (which connection was held up).

The summary per job: the skew the iterations carried (each iteration's largest), the sum over operations of the
emulation's ``after_launch_s`` minus the twin's, the late operations, the mean time per bucket in both engines,
and each engine's GPU utilisation (the emulation's from its ``summary.json``).
Prints a table; ``--out`` writes the JSON. Reads only: needs no root and starts nothing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from typing import List, Mapping, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)

from analysis.timeline import BadInput, Times, emulation_ops, twin_ops


def op_time(ranks: Mapping[int, Tuple[float, float, float]]) -> float:
    return max(t[2] for t in ranks.values()) - min(t[0] for t in ranks.values())


def skew(ranks: Mapping[int, Tuple[float, float, float]]) -> float:
    return max(t[0] for t in ranks.values()) - min(t[0] for t in ranks.values())


def after_launch(ranks: Mapping[int, Tuple[float, float, float]]) -> float:
    return max(t[2] for t in ranks.values()) - max(t[0] for t in ranks.values())


def spread(ranks: Mapping[int, Tuple[float, float, float]]) -> float:
    return max(t[2] for t in ranks.values()) - min(t[2] for t in ranks.values())


def delivery(ranks: Mapping[int, Tuple[float, float, float]]) -> float:
    """The longest wait of a rank for its ring predecessor's last message (rank r receives from r - 1)."""
    n = len(ranks)
    return max(ranks[r][2] - ranks[(r - 1) % n][1] for r in ranks if (r - 1) % n in ranks)


def compare(emulation: Times, twin: Times, late_s: float) -> List[dict]:
    """One row per operation both engines completed on every rank, in (job, iteration, bucket) order."""
    rows = []
    for key in sorted(emulation):
        emu, tw = emulation[key], twin.get(key)
        if not tw or len(tw) != len(emu) or any(math.isnan(t[2]) for t in tw.values()):
            continue
        rows.append({"job": key[0], "iteration": key[1], "bucket": key[2],
                     "emulation_s": op_time(emu), "twin_s": op_time(tw),
                     "skew_s": skew(emu), "twin_skew_s": skew(tw),
                     "after_launch_s": after_launch(emu), "twin_after_launch_s": after_launch(tw),
                     "spread_s": spread(emu), "twin_spread_s": spread(tw),
                     "delivery_s": delivery(emu), "late": spread(emu) >= late_s})
    return rows


def summarise(rows: List[dict], emulation_util: Mapping[str, float], twin_util: Mapping[str, float]) -> List[dict]:
    out = []
    for job in sorted({r["job"] for r in rows}):
        mine = [r for r in rows if r["job"] == job]
        iterations = sorted({r["iteration"] for r in mine})
        by_bucket = {}
        for b in sorted({r["bucket"] for r in mine}):
            ops = [r for r in mine if r["bucket"] == b]
            by_bucket[str(b)] = {"emulation_s": statistics.mean(r["emulation_s"] for r in ops),
                                 "twin_s": statistics.mean(r["twin_s"] for r in ops)}
        out.append({"job": job, "operations": len(mine),
                    "late_operations": sum(r["late"] for r in mine),
                    "spread_s_max": {"emulation": max(r["spread_s"] for r in mine),
                                     "twin": max(r["twin_spread_s"] for r in mine)},
                    "skew_s": {"emulation": sum(max(r["skew_s"] for r in mine if r["iteration"] == k)
                                                for k in iterations),
                               "twin": sum(max(r["twin_skew_s"] for r in mine if r["iteration"] == k)
                                           for k in iterations)},
                    "after_launch_excess_s": sum(r["after_launch_s"] - r["twin_after_launch_s"] for r in mine),
                    "gpu_utilization": {"emulation": emulation_util.get(job), "twin": twin_util.get(job)},
                    "op_time_by_bucket_s": by_bucket})
    return out


def table(rows: List[dict], jobs: List[dict]) -> str:
    lines = ["job  iteration  bucket  |  emulation: op_s = skew_s + after_launch_s, spread_s  |  twin: the same"]
    for r in rows:
        lines.append(f"{r['job']}  {r['iteration']}  {r['bucket']}  |  {r['emulation_s']:.2f} = {r['skew_s']:.2f} + "
                     f"{r['after_launch_s']:.2f}, {r['spread_s']:.2f}  |  {r['twin_s']:.2f} = "
                     f"{r['twin_skew_s']:.2f} + {r['twin_after_launch_s']:.2f}, {r['twin_spread_s']:.2f}"
                     f"{'  LATE' if r['late'] else ''}")
    for j in jobs:
        u = j["gpu_utilization"]
        emu = f"{u['emulation']:.3f}" if u["emulation"] is not None else "?"
        lines.append(f"{j['job']}: {j['operations']} operations, {j['late_operations']} late; skew carried "
                     f"{j['skew_s']['emulation']:.2f} s (twin {j['skew_s']['twin']:.2f} s); after the last launch "
                     f"{j['after_launch_excess_s']:+.2f} s against the twin; GPU utilisation emulation {emu}, "
                     f"twin {u['twin']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="an emulation run folder (testbed/run.py --out) with its workers' logs")
    p.add_argument("--job", help="only this job (by name)")
    p.add_argument("--late", type=float, default=0.5,
                   help="an operation whose ranks finish this far apart (seconds) or more counts as late")
    p.add_argument("--model", default="calibrated", help="the twin's model: calibrated or ideal")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args(argv)
    try:
        if a.late <= 0:
            raise BadInput("--late must be > 0")
        if a.model not in ("calibrated", "ideal"):
            raise BadInput(f"--model must be calibrated or ideal (got {a.model!r})")
        summary_path = os.path.join(a.run_dir, "summary.json")
        if not os.path.isfile(summary_path):
            raise BadInput(f"{a.run_dir}: no summary.json (not a run folder)")
        with open(summary_path) as f:
            summary = json.load(f)
        config = summary.get("config") or {}
        if config.get("engine", "emulation") != "emulation":
            raise BadInput(f"{a.run_dir}: a {config.get('engine')} run; this compares an emulation run with the twin")
        emulation = emulation_ops(a.run_dir)
        if a.job:
            emulation = {k: v for k, v in emulation.items() if k[0] == a.job}
            if not emulation:
                raise BadInput(f"no operations of a job named {a.job!r} in {a.run_dir}")
    except (BadInput, OSError, ValueError) as exc:
        sys.stderr.write(f"op_timeline.py: {exc}\n")
        return 2
    twin, twin_util = twin_ops(config, a.model)
    rows = compare(emulation, twin, a.late)
    emulation_util = {j["name"]: j.get("gpu_utilization") for j in summary.get("jobs") or []}
    jobs = summarise(rows, emulation_util, twin_util)
    result = {"command": " ".join(["research/op_timeline.py"] + (argv if argv is not None else sys.argv[1:])),
              "run": os.path.abspath(a.run_dir), "scheduler": config.get("scheduler"),
              "scenario": config.get("scenario_file"), "seed": config.get("seed"), "twin_model": a.model,
              "late_s": a.late, "jobs": jobs, "operations": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(table(rows, jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
