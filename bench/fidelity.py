#!/usr/bin/env python3
"""Rate invariance: do a scenario's results stay the same at every emulated link rate, and does the verdict know?

    sudo python bench/fidelity.py [--schedulers ecmp,bytescheduler,crux,flux] [--rates 2.5,5,10,20]
                                          [--seeds 1,2,3] [--transports tcp,lossless] [--scenario headline]
    python bench/fidelity.py --engine fluid --rates 2.5,5,10 --seeds 1 --transports tcp \
        --against results/fidelity/bench_fidelity_tcp_3seeds_ack_class.json --md F.md
    python bench/fidelity.py --verdict-table results/fidelity/verdict-wait-set.json

The scaling (workloads/scaling.py) promises the same utilisation at any emulated rate: every byte count grows
with the rate, so a transfer takes the same emulated time. What breaks the promise is the emulator: Open vSwitch
running out of CPU, TCP timeouts, packets lost in short queues. Each (transport, rate, scheduler, seed) runs the
scenario with ``--host-rate R --fabric-rate R``; the JSON printed has, per run, the cluster and per-job
utilisation, TCP timeouts and retransmissions (per job), class-FIFO drops, the smallest operation's packets per
hop, Open vSwitch's mean and peak CPU, the verdict and the wall time; per transport, the *capacity*: the highest
rate at which every scheduler's cluster utilisation (mean over seeds) stays within ``--band`` (0.02) of its
lowest-rate value, with every run at that rate and below judged faithful.

With ``--engine fluid`` the same runs go to the flow-level twin (calibrated at 5 Mbit/s; no root needed), and
``--against`` an earlier JSON of this benchmark (the emulation's) adds, per transport, rate and scheduler, the
twin's cluster and per-job utilisation minus the mean of the other JSON's seeds, and its TCP timeouts beside
theirs (``--md`` writes that as a table): whether the twin's terms, fitted at one rate, hold at the others.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import builds_fabric, set_up
    set_up(__file__, fabric=builds_fabric("bench", sys.argv[1:], "fidelity"))


from experiment.results import RunFolder, code_label, code_version

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]
SCENARIOS_DIR = os.path.join(PROJECT_DIR, "workloads", "scenarios")


def scenario_path(scenario: str) -> str:
    """A shipped scenario's name, or a scenario file."""
    return scenario if os.path.isfile(scenario) else os.path.join(SCENARIOS_DIR, f"{scenario}.yaml")


def run_one(scenario: str, transport: str, rate: float, scheduler: str, seed: int, work: str,
            extra, engine: str = "emulation") -> dict:
    out = os.path.join(work, f"{transport}-{rate:g}-{scheduler}-s{seed}")
    cmd = RUN + ["--scheduler", scheduler, "--scenario", scenario_path(scenario),
                 "--seed", str(seed), "--host-rate", f"{rate:g}", "--fabric-rate", f"{rate:g}",
                 "--transport", transport, "--out", out, "-q"] + list(extra)
    if engine == "fluid":
        cmd += ["--engine", "fluid"]
    else:
        cmd += ["--skip-checks"]
    started = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    record = {"transport": transport, "rate_mbps": rate, "scheduler": scheduler, "seed": seed,
              "exit_code": r.returncode, "wall_s": time.time() - started}
    summary = RunFolder(out).summary()
    if summary is None:
        record["error"] = (r.stderr.strip().splitlines() or ["no summary"])[-1]
        return record
    f = summary.fidelity
    classes = f.get("classes") or {}
    record.update(
        ok=summary.ok, faithful=summary.faithful, warnings=f.get("warnings", []),
        cluster=summary.cluster.get("gpu_utilization"),
        jobs={j.name: j.gpu_utilization for j in summary.jobs},
        timeouts=(f.get("tcp") or {}).get("timeouts"),
        retrans_fraction=(f.get("tcp") or {}).get("retrans_fraction"),
        timeouts_by_job={name: t.get("timeouts") for name, t in (f.get("tcp_by_job") or {}).items()},
        drops=classes.get("dropped"),
        queueing_delay_ms={c: v.get("queueing_delay_ms_mean") for c, v in (classes.get("by_class") or {}).items()},
        min_packets_per_op=min((p["min"] for p in (f.get("packets_per_op") or {}).values()), default=None),
        ovs_cpu=f.get("ovs_vswitchd_cpu"), ovs_cpu_peak=f.get("ovs_vswitchd_cpu_peak"),
        emulator_wait_ms=f.get("emulator_wait_ms"), emulator_wait_frames=f.get("emulator_wait_frames"),
        time_scale=((summary.config.get("scenario") or {}).get("scaling") or {}).get("time_scale"))
    if engine == "fluid":
        # The twin's timeouts are the ones its model expects, per job (there are no hosts' counters to read).
        by_job = {j.name: j.get("timeouts") for j in summary.jobs}
        record.update(engine="fluid", timeouts_by_job=by_job, timeouts=sum(t or 0 for t in by_job.values()))
    return record


def compare(runs, reference, transports, rates, schedulers):
    """Each (transport, rate, scheduler) of ``runs`` beside the mean of ``reference``'s seeds: cluster and per-job
    differences, the job furthest off, and both engines' TCP timeouts per run."""
    rows = []
    for transport in transports:
        for rate in rates:
            for scheduler in schedulers:
                def pick(source):
                    return [r for r in source if r.get("transport") == transport and r.get("rate_mbps") == rate
                            and r.get("scheduler") == scheduler and r.get("cluster") is not None]
                mine, theirs = pick(runs), pick(reference)
                if not mine or not theirs:
                    continue
                jobs = sorted(set.intersection(*(set(r["jobs"]) for r in mine + theirs)))
                job_diff = {j: statistics.mean(r["jobs"][j] for r in mine)
                            - statistics.mean(r["jobs"][j] for r in theirs) for j in jobs}
                worst = max(jobs, key=lambda j: abs(job_diff[j])) if jobs else None
                rows.append({
                    "transport": transport, "rate_mbps": rate, "scheduler": scheduler,
                    "cluster": statistics.mean(r["cluster"] for r in mine),
                    "reference_cluster": statistics.mean(r["cluster"] for r in theirs),
                    "reference_range": [min(r["cluster"] for r in theirs), max(r["cluster"] for r in theirs)],
                    "reference_seeds": len(theirs),
                    "reference_faithful": sum(1 for r in theirs if r.get("faithful")),
                    "cluster_diff": statistics.mean(r["cluster"] for r in mine)
                    - statistics.mean(r["cluster"] for r in theirs),
                    "job_diff": job_diff, "worst_job": worst,
                    "timeouts": statistics.mean(r.get("timeouts") or 0 for r in mine),
                    "reference_timeouts": statistics.mean(r.get("timeouts") or 0 for r in theirs)})
    return rows


def comparison_table(rows, reference_path: str) -> str:
    lines = [f"This benchmark's runs against the mean of the seeds of `{reference_path}` (cluster and per-job GPU "
             "utilisation, this minus that; TCP timeouts per run, this / that; that's runs judged faithful).", "",
             "| transport | rate (Mbit/s) | scheduler | cluster: this, that (range) | difference | job furthest off "
             "| every job | timeouts | faithful |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["reference_range"]
        jobs = ", ".join(f"{j} {d:+.3f}" for j, d in r["job_diff"].items())
        worst = f"{r['worst_job']} {r['job_diff'][r['worst_job']]:+.3f}" if r["worst_job"] else ""
        lines.append(f"| {r['transport']} | {r['rate_mbps']:g} | {r['scheduler']} | {r['cluster']:.3f}, "
                     f"{r['reference_cluster']:.3f} ({lo:.3f}-{hi:.3f}) | {r['cluster_diff']:+.3f} | {worst} | "
                     f"{jobs} | {r['timeouts']:.0f} / {r['reference_timeouts']:.0f} | "
                     f"{r['reference_faithful']}/{r['reference_seeds']} |")
    return "\n".join(lines) + "\n"


def capacity(runs, transport: str, rates, schedulers, band: float):
    """Highest rate whose mean cluster utilisation stays within ``band`` of the lowest rate's for every scheduler,
    every run up to it being faithful (None if even the lowest rate fails)."""
    best = None
    base = {}
    for rate in sorted(rates):
        ok = True
        for scheduler in schedulers:
            rs = [r for r in runs if r["transport"] == transport and r["rate_mbps"] == rate
                  and r["scheduler"] == scheduler and r.get("cluster") is not None]
            if not rs or not all(r.get("faithful") for r in rs):
                ok = False
                break
            mean = statistics.mean(r["cluster"] for r in rs)
            base.setdefault(scheduler, mean)
            if abs(mean - base[scheduler]) > band:
                ok = False
                break
        if not ok:
            break
        best = rate
    return best


def flagged(runs) -> dict:
    """(transport, rate) -> how many runs the verdict flagged, of how many (runs without a verdict left out)."""
    out = {}
    for r in runs:
        if "faithful" in r:
            count = out.setdefault((r["transport"], r["rate_mbps"]), {"flagged": 0, "runs": 0})
            count["flagged"] += not r["faithful"]
            count["runs"] += 1
    return dict(sorted(out.items()))


def verdict_table(paths) -> str:
    """Markdown: per output and rate, the runs the verdict flagged; then per run the rate, scheduler, seed, cluster
    utilisation, the emulator's wait (in frames' time), ovs-vswitchd's 2-s CPU peak and the verdict."""
    lines = ["| output | rate (Mbit/s) | scheduler | seed | cluster | wait (frames) | OVS CPU peak (2 s) | faithful |",
             "|---|---|---|---|---|---|---|---|"]

    def num(v, digits=3):
        return "" if v is None else f"{v:.{digits}f}"
    summary = ["| output | rate (Mbit/s) | runs flagged |", "|---|---|---|"]
    for path in paths:
        with open(path) as f:
            runs = json.load(f)["runs"]
        for r in sorted(runs, key=lambda r: (r["rate_mbps"], r["scheduler"], r["seed"])):
            lines.append(f"| {os.path.basename(path)} | {r['rate_mbps']:g} | {r['scheduler']} | {r['seed']} | "
                         f"{num(r.get('cluster'))} | {num(r.get('emulator_wait_frames'), 2)} | "
                         f"{num(r.get('ovs_cpu_peak'), 2)} | {r.get('faithful')} |")
        for (_transport, rate), count in flagged(runs).items():
            summary.append(f"| {os.path.basename(path)} | {rate:g} | {count['flagged']} of {count['runs']} |")
    return "\n".join(summary + [""] + lines) + "\n"


def rate_table(paths) -> str:
    """Markdown: per rate (rows) and scheduler (columns), over the runs of the given outputs together: cluster
    utilisation, mean [min, max] over seeds; at every rate above the lowest, the mean's change from the lowest
    rate's and the job whose mean changed most; TCP timeouts per run (mean); runs judged faithful; then the range
    of ovs-vswitchd's 2-s CPU peak and of the wall time per run."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs += json.load(f)["runs"]
    schedulers = list(dict.fromkeys(r["scheduler"] for r in runs))
    rates = sorted({r["rate_mbps"] for r in runs})
    transports = sorted({r["transport"] for r in runs})
    lines = []
    for transport in transports:
        if len(transports) > 1:
            lines += [f"`{transport}`:", ""]
        lines += ["| rate (Mbit/s) | " + " | ".join(schedulers) + " | OVS CPU peak (2 s) | wall per run (s) |",
                  "|---|" + "---|" * (len(schedulers) + 2)]
        mine = [r for r in runs if r["transport"] == transport and r.get("cluster") is not None]
        low = min(r["rate_mbps"] for r in mine) if mine else None
        for rate in rates:
            at = [r for r in mine if r["rate_mbps"] == rate]
            if not at:
                continue
            cells = []
            for s in schedulers:
                these = [r for r in at if r["scheduler"] == s]
                if not these:
                    cells.append("")
                    continue
                u = [r["cluster"] for r in these]
                cell = f"{statistics.mean(u):.3f} [{min(u):.3f}, {max(u):.3f}]"
                base = [r for r in mine if r["rate_mbps"] == low and r["scheduler"] == s]
                if rate != low and base:
                    change = statistics.mean(u) - statistics.mean(r["cluster"] for r in base)
                    jobs = {j: statistics.mean(r["jobs"][j] for r in these)
                            - statistics.mean(r["jobs"][j] for r in base) for j in these[0]["jobs"]}
                    job = max(jobs, key=lambda j: abs(jobs[j]))
                    cell += f" ({change:+.3f}; {job} {jobs[job]:+.3f})"
                timeouts = statistics.mean(r.get("timeouts") or 0 for r in these)
                faithful = sum(1 for r in these if r.get("faithful"))
                cells.append(f"{cell}; {timeouts:.0f} RTOs; {faithful}/{len(these)} faithful")
            peaks = [r["ovs_cpu_peak"] for r in at if r.get("ovs_cpu_peak") is not None]
            walls = [r["wall_s"] for r in at if r.get("wall_s") is not None]
            lines.append(f"| {rate:g} | " + " | ".join(cells)
                         + f" | {_span(peaks, 2)} | {_span(walls, 0)} |")
        lines.append("")
    return "\n".join(lines)


def _span(values, digits) -> str:
    if not values:
        return ""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedulers", default="ecmp,bytescheduler,crux,flux")
    p.add_argument("--rates", default="2.5,5,10,20", help="emulated link rates, Mbit/s (host and fabric)")
    p.add_argument("--seeds", default="1")
    p.add_argument("--transports", default="tcp,lossless")
    p.add_argument("--scenario", default="headline", help="a shipped scenario, or a scenario file")
    p.add_argument("--band", type=float, default=0.02, help="allowed drift of the cluster utilisation")
    p.add_argument("--engine", choices=["emulation", "fluid"], default="emulation",
                   help="emulation (root) or the flow-level twin (testbed/run.py --engine fluid)")
    p.add_argument("--against", metavar="JSON", help="an earlier output of this benchmark to compare with")
    p.add_argument("--md", metavar="FILE", help="with --against: write the comparison as a Markdown table")
    p.add_argument("--verdict-table", nargs="+", metavar="JSON",
                   help="print, from outputs of this benchmark, each run's wait, CPU peak and verdict (Markdown)")
    p.add_argument("--rate-table", nargs="+", metavar="JSON",
                   help="print, from outputs of this benchmark, the utilisation per rate and scheduler over their "
                        "runs together, with timeouts, verdicts, CPU peak and wall time (Markdown)")
    p.add_argument("extra", nargs="*", help="more runner flags, after --")
    args = p.parse_args(argv)
    for flag, paths, table in (("--rate-table", args.rate_table, rate_table),
                               ("--verdict-table", args.verdict_table, verdict_table)):
        if paths:
            try:
                sys.stdout.write(table(paths))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                sys.stderr.write(f"bench/fidelity.py: {flag}: not this benchmark's JSON ({exc})\n")
                return 2
            return 0
    try:
        rates = [float(x) for x in args.rates.split(",") if x]
        seeds = [int(x) for x in args.seeds.split(",") if x]
    except ValueError as exc:
        sys.stderr.write(f"bench/fidelity.py: {exc}\n")
        return 2
    schedulers = [s for s in args.schedulers.split(",") if s]
    transports = [t for t in args.transports.split(",") if t]
    if not os.path.isfile(scenario_path(args.scenario)):
        sys.stderr.write(f"bench/fidelity.py: no shipped scenario or scenario file {args.scenario}\n")
        return 2
    reference = None
    if args.against:
        try:
            with open(args.against) as f:
                reference = json.load(f)["runs"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            sys.stderr.write(f"bench/fidelity.py: --against {args.against}: not this benchmark's JSON ({exc})\n")
            return 2
    elif args.md:
        sys.stderr.write("bench/fidelity.py: --md needs --against\n")
        return 2
    if args.engine == "emulation" and os.geteuid() != 0:
        sys.stderr.write("bench/fidelity.py: must run as root (it runs the testbed; --engine fluid does not)\n")
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as work:
        for transport in transports:
            for rate in rates:
                for seed in seeds:
                    for scheduler in schedulers:
                        record = run_one(args.scenario, transport, rate, scheduler, seed, work, args.extra,
                                         args.engine)
                        runs.append(record)
                        sys.stderr.write(f"{transport} {rate:g} Mbit/s {scheduler} s{seed}: cluster "
                                         f"{record.get('cluster')}, timeouts {record.get('timeouts')}, drops "
                                         f"{record.get('drops')}, faithful {record.get('faithful')}, "
                                         f"{record['wall_s']:.0f} s\n")
    out = {"command": " ".join(sys.argv), "scenario": args.scenario, "band": args.band, "engine": args.engine,
           "git_commit": code_label(code_version(PROJECT_DIR)), "runs": runs,
           "flagged": {f"{t} {rate:g}": count for (t, rate), count in flagged(runs).items()}}
    if args.engine == "emulation":
        # The capacity is the emulator's: the twin has no CPU to run out of.
        out["capacity_mbps"] = {t: capacity(runs, t, rates, schedulers, args.band) for t in transports}
    if reference is not None:
        out["against"] = args.against
        out["comparison"] = compare(runs, reference, transports, rates, schedulers)
        if args.md:
            with open(args.md, "w") as f:
                f.write(comparison_table(out["comparison"], args.against))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
