"""Run the workers of one or more jobs on this machine, without Mininet, over loopback.

Every rank gets its own loopback address, ``127.0.{job index + 1}.{rank + 1}`` (all of 127.0.0.0/8 is local on
Linux), so every worker can use the real port encoding of ``core.model`` without collisions, exactly as on
the emulated fabric. Each worker is a subprocess (``python -m workloads.worker``) writing its ground-truth log to
``out_dir/<job>-rank<r>.jsonl`` and its stdout/stderr to ``out_dir/<job>-rank<r>.out``.

Loopback has no bandwidth limit worth the name; ``pace_mbps`` makes every connection send at a fixed rate so that
communication takes time (it does not model contention between flows: that is what the emulated network is for).

Usage::

    python -m workloads.local --job-file JOB.json [--job-file JOB2.json ...] --out-dir DIR [--pace-mbps 50]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from core.model import JobSpec

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def local_address(job_index: int, rank: int) -> str:
    if not 0 <= rank < 254:
        raise ValueError(f"rank {rank} does not fit a loopback address octet")
    return f"127.0.{job_index + 1}.{rank + 1}"


def localize(job: JobSpec) -> JobSpec:
    """The job with loopback addresses (and host names) for every rank."""
    return dataclasses.replace(job, addresses=tuple(local_address(job.index, r) for r in range(job.workers)),
                               hosts=tuple(f"local-{job.index}-{r}" for r in range(job.workers)))


def _kill(procs: Sequence[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_local_jobs(jobs: Sequence[JobSpec], out_dir: str, events_socket: Optional[str] = None,
                   timeout: float = 120.0, seed: int = 0, start_delay: Optional[float] = None,
                   pace_mbps: Optional[float] = None, connect_timeout: float = 30.0) -> Dict[str, List[str]]:
    """Run all workers of ``jobs`` concurrently and wait for them; returns each job's log paths by rank.

    Iteration 0 of job j starts at ``now + start_delay + j.start_offset_s``; the default delay leaves time for the
    interpreters to start and the rings to connect. Workers still running after ``timeout`` seconds are killed and
    TimeoutError is raised; a worker that fails raises RuntimeError with the end of its output.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = sum(j.workers for j in jobs)
    if start_delay is None:
        start_delay = 1.0 + 0.1 * total
    base = time.time() + start_delay
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    procs: List[subprocess.Popen] = []
    outputs: List[Path] = []
    logs: Dict[str, List[str]] = {}
    try:
        for job in jobs:
            job = localize(job)
            job_file = out / f"{job.name}.job.json"
            job_file.write_text(json.dumps(job.to_dict(), indent=1))
            logs[job.name] = []
            for rank in range(job.workers):
                log = out / f"{job.name}-rank{rank}.jsonl"
                cmd = [sys.executable, "-m", "workloads.worker", "--job-file", str(job_file), "--rank", str(rank),
                       "--log", str(log), "--seed", str(seed), "--start-at", repr(base + job.start_offset_s),
                       "--connect-timeout", str(connect_timeout)]
                if events_socket:
                    cmd += ["--events-socket", events_socket]
                if pace_mbps:
                    cmd += ["--pace-mbps", str(pace_mbps)]
                output = out / f"{job.name}-rank{rank}.out"
                with open(output, "wb") as fh:
                    procs.append(subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=fh,
                                                  stderr=subprocess.STDOUT))
                outputs.append(output)
                logs[job.name].append(str(log))
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"workers still running after {timeout} s (see {out})") from None
        failed = [(p, o) for p, o in zip(procs, outputs) if p.returncode != 0]
        if failed:
            p, o = failed[0]
            raise RuntimeError(f"{len(failed)} worker(s) failed; {o} (exit {p.returncode}):\n{_tail(o)}")
    finally:
        _kill(procs)
    return logs


def run_local_job(job: JobSpec, out_dir: str, events_socket: Optional[str] = None, timeout: float = 120.0,
                  **kwargs) -> List[str]:
    """Run all workers of one job on loopback; returns the log paths by rank (see ``run_local_jobs``)."""
    return run_local_jobs([job], out_dir, events_socket=events_socket, timeout=timeout, **kwargs)[job.name]


def main(argv: Optional[List[str]] = None) -> int:
    from workloads.truth import cluster_utilization, summarize_job

    p = argparse.ArgumentParser(description="Run jobs' workers on loopback without Mininet.")
    p.add_argument("--job-file", action="append", required=True, help="JobSpec JSON (repeat for several jobs)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--events-socket", default=None)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pace-mbps", type=float, default=None)
    args = p.parse_args(argv)
    jobs = []
    for path in args.job_file:
        with open(path, encoding="utf-8") as f:
            jobs.append(JobSpec.from_dict(json.load(f)))
    logs = run_local_jobs(jobs, args.out_dir, events_socket=args.events_socket, timeout=args.timeout,
                          seed=args.seed, pace_mbps=args.pace_mbps)
    summaries = [summarize_job(paths) for paths in logs.values()]
    for s in summaries:
        print(json.dumps({k: s[k] for k in ("job", "workers", "iteration_time_mean_s", "gpu_utilization",
                                            "check_failures")}))
    print(json.dumps({"cluster_utilization": cluster_utilization(summaries)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
