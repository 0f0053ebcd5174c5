"""The workload phase of a run and what is computed from it: workers, progress, fidelity, summary.

``run_jobs`` starts one worker process per rank in its Mininet host (``python -m workloads.worker``), shows a
progress bar of finished iterations, applies the scheduled faults, enforces the time limit and summarises the
workers' ground truth (workloads/truth.py); whether the emulation kept up is testbed/fidelity.py's to say.
``print_summary`` is the run's last words on the terminal. Files are named and read through experiment/results.py.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from typing import Dict, List, Sequence

from core.faults import Fault
from core.model import JobSpec
from testbed import state
from experiment.results import RunFolder, RunSummary

LOG = logging.getLogger("flux.run")


class _LogTail:
    """Counts finished iterations in a worker's JSONL log without re-reading it."""

    def __init__(self, path: str):
        self.path, self.offset, self.iterations, self.buf = path, 0, 0, ""

    def poll(self) -> int:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return self.iterations
        self.buf += chunk
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            if '"type":"iteration"' in line or '"type": "iteration"' in line:
                self.iterations += 1
        return self.iterations


def run_jobs(tb, jobs: Sequence[JobSpec], folder: RunFolder, seed: int, time_limit_s: float,
             progress: bool = True, faults: Sequence[Fault] = (), monitor=None, interrupted=None) -> dict:
    """Run the jobs' workers to the end (or the time limit, or a controller failure) and summarise their logs.

    The controllers are checked on every round (twice a second): a run whose scheduler died would otherwise go
    on with its last rules and report figures that are not the scheduler's (the testbed restarts a dead one if
    it can, and the gap is recorded). ``faults`` happen at their time from the workload's origin (iteration 0 of
    jobs without an offset); each is recorded in the returned ``faults`` timeline. ``monitor`` (a
    testbed.fidelity.FidelityMonitor, started by the caller) is ticked on every round; ``interrupted`` (if given) is
    called on every round and raises to stop the workload (a signal the runner received)."""
    from workloads import truth

    # Connecting all rings takes a moment; every job's iteration 0 starts at a common origin plus its offset.
    origin = time.time() + 2.0 + 0.05 * sum(j.workers for j in jobs)
    procs: List[tuple] = []
    tails: List[_LogTail] = []
    logs: Dict[str, List[str]] = defaultdict(list)
    for job in jobs:
        job_file = folder.write_job(job)
        for rank in range(job.workers):
            log = folder.worker_log(job.name, rank)
            os.makedirs(os.path.dirname(log), exist_ok=True)
            stderr = open(folder.worker_stderr(job.name, rank), "w")
            p = tb.host_popen(job.hosts[rank], [sys.executable, "-m", "workloads.worker", "--job-file", job_file,
                                                "--rank", str(rank), "--events-socket", tb.events_socket,
                                                "--log", log, "--seed", str(seed),
                                                "--start-at", f"{origin + job.start_offset_s:.6f}"]
                              + tb.transport.worker_args(),
                              stdout=stderr, stderr=subprocess.STDOUT)
            procs.append((job, rank, p, stderr))
            logs[job.name].append(log)
            if rank == 0:
                tails.append(_LogTail(log))
    total = sum(j.iterations for j in jobs)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="it", desc="iterations (all jobs)", file=sys.stderr, leave=False)
    started = time.time()
    failed = []
    timed_out = False
    controller_failure: List[str] = []
    pending = sorted(faults, key=lambda f: f.at_s)
    timeline: List[dict] = []
    try:
        while True:
            while pending and time.time() >= origin + pending[0].at_s:
                fault = pending.pop(0)
                record = tb.apply_fault(fault)
                record["applied_s"] = record["applied_at"] - origin
                timeline.append(record)
                LOG.warning("fault: %s (at %.2f s)", fault.text, record["applied_s"])
            running = [x for x in procs if x[2].poll() is None]
            if bar is not None:
                done = sum(t.poll() for t in tails)
                bar.update(done - bar.n)
            if not running:
                break
            if time.time() - started > time_limit_s:
                timed_out = True
                LOG.error("time limit of %.0f s reached; stopping the workers", time_limit_s)
                break
            if interrupted is not None:
                interrupted()
            if monitor is not None:
                monitor.tick()
            controller_failure = tb.controller_problems()
            if controller_failure:
                LOG.error("%s; stopping the workers", "; ".join(controller_failure))
                break
            # Checks twice a second, and on time for the next fault.
            time.sleep(max(0.0, min(0.5, origin + pending[0].at_s - time.time())) if pending else 0.5)
    finally:
        if bar is not None:
            bar.close()
        # All at once: one by one, 16 workers that ignore SIGTERM would hold the runner for 48 s.
        state.end_processes([(p.pid, signal.SIGTERM) for _job, _rank, p, _err in procs if p.poll() is None],
                            grace_s=3.0)
        for job, rank, p, stderr in procs:
            p.wait()
            stderr.close()
            if p.returncode != 0:
                failed.append(f"{job.name} rank {rank} (exit {p.returncode})")
    wall = time.time() - started
    if failed:
        LOG.error("workers failed: %s (see %s)", ", ".join(failed), folder.file("workers"))
    job_summaries = []
    for job in jobs:
        s = {"name": job.name, "model": job.model.name, "workers": job.workers, "iterations": job.iterations,
             "hosts": list(job.hosts)}
        try:
            s.update(truth.summarize_job(logs[job.name]))
            # Every operation's record stays in the worker logs; the summary keeps their statistics.
            s.pop("ops", None)
        except Exception as exc:  # a broken log must be reported, not crash the summary
            s["error"] = f"cannot summarise logs: {exc}"
        job_summaries.append(s)
    valid = [s for s in job_summaries if "gpu_utilization" in s]
    cluster = {"gpu_utilization": truth.cluster_utilization(valid) if valid else None,
               "gpus": sum(j.workers for j in jobs)}
    if pending:
        LOG.warning("faults never applied (the workload ended first): %s", ", ".join(f.text for f in pending))
    return {"jobs": job_summaries, "cluster": cluster, "workload_wall_s": wall,
            "faults": timeline + [{"fault": f.text, "at_s": f.at_s, "applied_at": None} for f in pending],
            "workload_failed": bool(failed) or timed_out or bool(controller_failure), "workers_failed": failed,
            "timed_out": timed_out, "controller_failure": controller_failure}


def print_summary(summary: RunSummary, out: str) -> None:
    print()
    status = "FAILED" if not summary.ok else "COMPLETED, NOT FAITHFUL" if summary.faithful is False else "OK"
    print(f"run {summary.run_id}: {status}" + (f" ({summary.error})" if summary.error else ""))
    if summary.jobs:
        print(f"  {'job':<12} {'model':<12} {'workers':>7} {'iters':>5} {'iter mean s':>11} {'GPU util':>8} "
              f"{'util (counters)':>15}")
        for j in summary.jobs:
            mean, util, rec = j.iteration_time_mean_s, j.gpu_utilization, j.gpu_utilization_reconstructed
            print(f"  {j.name:<12} {j.model:<12} {j.workers:>7} {j.iterations:>5} "
                  f"{'-' if mean is None else f'{mean:.3f}':>11} {'-' if util is None else f'{util:.3f}':>8} "
                  f"{'-' if rec is None else f'{rec:.3f}':>15}")
        cu = summary.cluster.get("gpu_utilization")
        if cu is not None:
            print(f"  cluster GPU utilisation: {cu:.3f}")
    ctl = summary.controller
    if ctl.get("reaction_latency_ms_median") is not None:
        print(f"  controller: {ctl.get('flowmods')} flow-mods, reaction latency median "
              f"{ctl['reaction_latency_ms_median']:.1f} ms / p99 {ctl['reaction_latency_ms_p99']:.1f} ms")
    applied = [f for f in summary.extra.get("faults") or [] if f.get("applied_s") is not None]
    if applied:
        print("  faults: " + "; ".join(f"{f['fault']} (applied at {f['applied_s']:.2f} s)" for f in applied))
    for change in ctl.get("fabric_changes") or []:
        print(f"  rerouted: links down {', '.join(change['links_down']) or 'none'}: {change['flowmods']} "
              f"flow-mods confirmed in {1e3 * change['latency_s']:.1f} ms")
    for r in ctl.get("restarts") or []:
        print(f"  controller restarted: {r['reason']}; back after {r['recovery_s']:.2f} s")
    for w in summary.fidelity.get("warnings", []):
        print(f"  WARNING: {w}")
    for note in summary.fidelity.get("notes", []):
        print(f"  note: {note}")
    print(f"  results: {out}/summary.json")
