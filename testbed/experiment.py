"""The workload phase of a run and what is computed from it: workers, progress, fidelity, summary.

``run_jobs`` starts one worker process per rank in its Mininet host (``python -m workloads.worker``), shows a
progress bar of finished iterations, enforces the time limit and summarises the workers' ground truth
(workloads/truth.py). ``fidelity`` says whether the emulation kept up: the OVS forwarding thread's CPU and the
achieved versus configured rate of every switch port, from the controller's counters. ``print_summary`` is the
run's last words on the terminal. Files are named and read through testbed/results.py.
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
from testbed.results import RunFolder, RunSummary

LOG = logging.getLogger("flux.run")

OVS_CPU_LIMIT = 0.85        # fraction of one core above which ovs-vswitchd starts dropping fidelity
RATE_TOLERANCE = 1.05       # achieved/configured above this means a port was not shaped as configured
UNEXPLAINED_IDLE_LIMIT = 0.02  # GPU idle time not spent waiting for an operation, as a fraction of wall time


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
             progress: bool = True, faults: Sequence[Fault] = ()) -> dict:
    """Run the jobs' workers to the end (or the time limit, or a controller failure) and summarise their logs.

    The controllers are checked on every round (twice a second): a run whose scheduler died would otherwise go
    on with its last rules and report figures that are not the scheduler's (the testbed restarts a dead one if
    it can, and the gap is recorded). ``faults`` happen at their time from the workload's origin (iteration 0 of
    jobs without an offset); each is recorded in the returned ``faults`` timeline."""
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
                                                "--start-at", f"{origin + job.start_offset_s:.6f}"],
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


def configured_port_rates(tb) -> Dict[tuple, float]:
    """(dpid, port) -> configured egress rate in Mbit/s."""
    return {(dpid, port): rate for _name, dpid, port, rate in tb.layout.egress_ports()}


def port_rate_series(folder: RunFolder, window_s: float = 2.0, column: str = "tx_bytes") -> Dict[tuple, List[tuple]]:
    """(dpid, port) -> [(time, Mbit/s over the last ``window_s``)] of one counter column of port_stats.csv.

    Windows of 2 s keep the jitter of the polls' timestamps (tens of ms under load) below 5% of a rate."""
    series = {}
    for key, pts in folder.port_series(column).items():
        out, j = [], 0
        for i, (t, b) in enumerate(pts):
            while pts[j][0] < t - window_s:
                j += 1
            if i > j and t - pts[j][0] >= 0.5 * window_s:
                out.append((t, (b - pts[j][1]) * 8 / (t - pts[j][0]) / 1e6))
        series[key] = out
    return series


def tcp_counters(tb) -> Dict[str, int]:
    """Sum over all hosts of TCP segments sent, retransmitted, and retransmission timeouts (per namespace)."""
    total = {"out_segs": 0, "retrans_segs": 0, "timeouts": 0}
    for host in tb.hosts.values():
        text = host.cmd("cat /proc/net/snmp /proc/net/netstat")
        rows = [line.split() for line in text.splitlines()]
        for head, vals in zip(rows, rows[1:]):
            if not head or not vals or head[0] != vals[0] or head[0] not in ("Tcp:", "TcpExt:"):
                continue
            table = dict(zip(head[1:], vals[1:]))
            if head[0] == "Tcp:" and "OutSegs" in table:
                total["out_segs"] += int(table["OutSegs"])
                total["retrans_segs"] += int(table["RetransSegs"])
            elif head[0] == "TcpExt:" and "TCPTimeouts" in table:
                total["timeouts"] += int(table["TCPTimeouts"])
    return total


def fidelity(folder: RunFolder, tb, cpu0, cpu1, wall_s: float, tcp0=None, tcp1=None, jobs=None) -> dict:
    """Did the emulation keep up? OVS CPU, achieved vs configured port rates, TCP retransmissions, and GPU
    idle time that no wait explains (the emulated GPU was late because the machine's CPUs were busy)."""
    warnings: List[str] = []
    notes: List[str] = []    # worth knowing, but not the emulator's failing
    result: dict = {"wall_s": wall_s}
    if tcp0 and tcp1:
        delta = {k: tcp1[k] - tcp0[k] for k in tcp0}
        delta["retrans_fraction"] = delta["retrans_segs"] / max(delta["out_segs"], 1)
        result["tcp"] = delta
    if jobs:
        walls = sum(j.get("wall_s", 0) * j.get("workers", 1) for j in jobs if j.get("wall_s"))
        unexplained = sum(max(j.get("idle_s", 0) - j.get("wait_s", 0), 0) * j.get("workers", 1)
                          for j in jobs if j.get("wall_s"))
        if walls:
            frac = unexplained / walls
            result["unexplained_idle_fraction"] = frac
            if frac > UNEXPLAINED_IDLE_LIMIT:
                warnings.append(f"{frac:.1%} of GPU time was idle without waiting for any operation: workers "
                                f"were delayed by a busy CPU, utilisation is underestimated by about that much")
    if jobs:
        dropped = sum(j.get("events_dropped", 0) for j in jobs)
        result["events_dropped"] = dropped
        scheduler_gaps = [r for r in getattr(tb, "restarts", []) if r["role"] == "scheduler"]
        if dropped and scheduler_gaps:
            # The events were sent while the scheduler was down: the fault's doing (recorded in
            # controller.restarts), not the emulator's, so the verdict does not count them.
            result["events_dropped_while_scheduler_down"] = dropped
            notes.append(f"{dropped} operation events were sent while the scheduler was down "
                         f"({len(scheduler_gaps)} restart(s)): it decided without them")
        elif dropped:
            warnings.append(f"{dropped} operation events never reached the controller (its queue was full): the "
                            f"scheduler decided without them")
    if cpu0 is not None and cpu1 is not None and wall_s > 0:
        frac = (cpu1 - cpu0) / wall_s
        result["ovs_vswitchd_cpu"] = frac
        if frac > OVS_CPU_LIMIT:
            warnings.append(f"ovs-vswitchd used {frac:.0%} of a core: the emulator was saturated, rates and "
                            f"timings may be distorted")
    if folder.has(RunFolder.PORT_STATS):
        rates = configured_port_rates(tb)
        peers = tb.layout.peer_ports()
        tx = port_rate_series(folder, column="tx_bytes")
        rx = port_rate_series(folder, column="rx_bytes")
        ports = []
        for key, pts in tx.items():
            if key not in rates or not pts:
                continue
            # OVS counts a packet as sent when it hands it to the port, before the port's qdisc may drop it:
            # what a link really carried is what its far end received, where the far end is a switch.
            peer = peers.get(key)
            measured = rx.get(peer) if peer else None
            source = "peer_rx" if measured else "tx"
            measured = measured or pts
            peak = max(r for _, r in measured)
            ports.append({"dpid": key[0], "port": key[1], "configured_mbps": rates[key], "peak_mbps": peak,
                          "peak_fraction": peak / rates[key], "measured_by": source})
        ports.sort(key=lambda p: -p["peak_fraction"])
        result["ports"] = ports
        result["peak_port_fraction"] = ports[0]["peak_fraction"] if ports else None
        over = [p for p in ports if p["peak_fraction"] > RATE_TOLERANCE and p["measured_by"] == "peer_rx"]
        if over:
            warnings.append(f"{len(over)} ports exceeded their configured rate by more than "
                            f"{RATE_TOLERANCE - 1:.0%} (shaping not effective)")
        busy = [p for p in ports if p["peak_fraction"] > 0.5]
        result["ports_above_half_rate"] = len(busy)
    result["warnings"] = warnings
    if notes:
        result["notes"] = notes
    result["faithful"] = not warnings
    for w in warnings:
        LOG.warning("FIDELITY: %s", w)
    return result


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
