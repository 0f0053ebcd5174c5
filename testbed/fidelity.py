"""Is a run's figure about the scheduler, or about the emulator? The measurements behind the verdict, and the verdict.

Measured during the workload by ``FidelityMonitor`` (ticked by the workload loop twice a second; each tick is one
``tc -s qdisc show`` of every interface and one read of ovs-vswitchd's CPU time):

* the emulator's own wait: the bytes waiting in Open vSwitch's per-port receive sockets (testbed/ovs.py), sampled
  on a thread of its own every 20 ms on average, whose mean divided by the fabric's forwarding rate is, by
  Little's law, the mean time a packet waits at a switch for the userspace datapath before it reaches the port's
  classes;
* Open vSwitch's CPU: the mean over the workload and the peak over any ``CPU_WINDOW_S`` window;
* per priority class of every switch port (its FIFO under the HTB tree): bytes sent, packets dropped, and the
  mean queueing delay by Little's law (time-averaged backlog / throughput, the backlog sampled at every tick);
* before and after: the TCP counters of every host namespace, so per job: segments sent, retransmitted, and
  retransmission timeouts (a job's hosts are its own);
* from the jobs as scaled: the data packets each operation puts on a ring hop (``core.ring.packets_per_hop``);
* Open vSwitch's send buffer (testbed/ovs.py) against the peak of the sampled backlogs of all FIFOs together;
* from the monitor's port counters (port_stats.csv): the peak achieved rate of every port against its configured
  rate (measured where the link ends, at the far switch's receive counter).

``verdict`` turns them into ``fidelity.warnings``; a run with any warning is not faithful. The thresholds and how
they were set are in docs/fidelity.md (from the rate-invariance runs of bench/fidelity.py).
"""
from __future__ import annotations

import logging
import os
import random
import statistics
import subprocess
import threading
import time
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from core.fabric import FABRIC_NAME
from core.model import JobSpec
from core.ring import packets_per_hop
from core.stats import percentile
from testbed.ovs import FRAME_BYTES, PACKET_TRUESIZE, receive_backlog, socket_inodes
from testbed.qos import parse_qdisc_stats
from experiment.results import RunFolder
from workloads.scaling import DEFAULT_MIN_PACKETS

LOG = logging.getLogger("flux.run")

# The mean time a packet waits at a switch for the userspace datapath, as a fraction of one full-size frame's time
# on the fastest link: above half a frame the emulator, not the emulated link, sets the packets' timing. Set
# between the runs that keep and lose their utilisation (results/fidelity/verdict-wait-set.json), judged on runs it
# was not set on (results/fidelity/verdict-wait-check-*.json); docs/fidelity.md.
EMULATOR_WAIT_LIMIT = 0.5
# Mean gap between samples of the receive sockets' backlog (randomised). On a lightly loaded run a handful of
# samples catch a burst and the rest read nothing, so the mean's error is that of a few counts: 50 samples a second
# keep it well below the limit on the smoke runs (``emulator_wait_frames_se``), at a few tens of microseconds each.
BACKLOG_SAMPLE_S = 0.02
SOCKETS_REFRESH_S = 1.0        # how often the sampler reads again which sockets are ovs-vswitchd's
# Open vSwitch's CPU judges a run only where the wait cannot be measured (the kernel datapath): the userspace
# datapath's main loop polls every port on every wake-up, so its CPU stays near a core across a wide range of
# packet rates and says little about whether packets were delayed (docs/fidelity.md).
OVS_CPU_LIMIT = 0.85          # mean fraction of one core above which ovs-vswitchd starts dropping fidelity
# ... and over any CPU_WINDOW_S window (a saturated datapath delays every packet). Set from the rate-invariance
# runs (docs/fidelity.md): every run that kept its utilisation peaked at 0.73-0.80, every run that lost it at
# 0.89-0.92.
OVS_CPU_PEAK_LIMIT = 0.85
CPU_WINDOW_S = 2.0
RATE_TOLERANCE = 1.05         # achieved/configured above this means a port was not shaped as configured
UNEXPLAINED_IDLE_LIMIT = 0.02  # GPU idle time not spent waiting for an operation, as a fraction of wall time
# Time a job's flows spent in retransmission timeouts (at least the minimum RTO each), as a fraction of the job's
# run (iterations x mean iteration time). The minimum RTO is wall-clock time that the scaling does not scale: at a
# higher emulated rate iterations are shorter and every timeout weighs more. Set from the rate-invariance runs of
# bench/fidelity.py (docs/fidelity.md): runs that kept their utilisation within 0.02 of the lowest rate's
# reached at most 0.70 (bytescheduler at 5 Mbit/s), runs that lost 0.05-0.11 reached 0.88 and more.
RTO_SHARE_LIMIT = 0.8
DEFAULT_RTO_MIN_S = 0.2       # Linux's TCP_RTO_MIN
MIN_PACKETS_PER_OP = DEFAULT_MIN_PACKETS  # below this an operation's class hardly matters (a handful of packets)
# Open vSwitch's send socket (testbed/ovs.py): sampled backlogs above this fraction of its buffer mean that the
# switch dropped packets without a counter at some point (samples miss the peaks, so the limit is below 1).
SEND_BUFFER_LIMIT = 0.8


def ovs_cpu_seconds() -> Optional[float]:
    """CPU seconds (user + system) ovs-vswitchd has used so far, or None when it cannot be read."""
    try:
        with open("/var/run/openvswitch/ovs-vswitchd.pid") as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def tcp_counters_by_host(tb) -> Dict[str, Dict[str, int]]:
    """Per host: TCP segments sent, retransmitted, and retransmission timeouts (each host is a namespace)."""
    out = {}
    for name, host in tb.hosts.items():
        counts = {"out_segs": 0, "retrans_segs": 0, "timeouts": 0}
        text = host.cmd("cat /proc/net/snmp /proc/net/netstat")
        rows = [line.split() for line in text.splitlines()]
        for head, vals in zip(rows, rows[1:]):
            if not head or not vals or head[0] != vals[0] or head[0] not in ("Tcp:", "TcpExt:"):
                continue
            table = dict(zip(head[1:], vals[1:]))
            if head[0] == "Tcp:" and "OutSegs" in table:
                counts["out_segs"] = int(table["OutSegs"])
                counts["retrans_segs"] = int(table["RetransSegs"])
            elif head[0] == "TcpExt:" and "TCPTimeouts" in table:
                counts["timeouts"] = int(table["TCPTimeouts"])
        out[name] = counts
    return out


def switch_qdiscs() -> Dict[Tuple[str, int], Tuple[int, int, int]]:
    """(port, class) -> (bytes sent, packets dropped, bytes queued) of every switch port's class FIFOs."""
    out = subprocess.run(["tc", "-s", "qdisc", "show"], capture_output=True, text=True).stdout
    return {k: v for k, v in parse_qdisc_stats(out).items() if FABRIC_NAME.fullmatch(k[0])}


class FidelityMonitor:
    """Samples what the verdict needs while the workload runs (see the module docstring)."""

    def __init__(self, tb):
        self.tb = tb
        self.cpu: List[Tuple[float, float]] = []        # (time, ovs-vswitchd CPU seconds)
        self.receive_backlog: List[int] = []             # bytes waiting in its receive sockets, per sample
        self._sampler: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.backlog: Dict[Tuple[str, int], List[int]] = defaultdict(list)
        self.qdisc0: Dict[Tuple[str, int], Tuple[int, int, int]] = {}
        self.qdisc1: Dict[Tuple[str, int], Tuple[int, int, int]] = {}
        self.tcp0: Dict[str, Dict[str, int]] = {}
        self.tcp1: Dict[str, Dict[str, int]] = {}
        self.t0 = self.t1 = 0.0

    def start(self) -> None:
        self.tcp0 = tcp_counters_by_host(self.tb)
        self.qdisc0 = switch_qdiscs()
        self.t0 = time.time()
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample_backlog, name="emulator-wait", daemon=True)
        self._sampler.start()
        self.tick()

    def _sample_backlog(self) -> None:
        """The receive sockets' backlog every ``BACKLOG_SAMPLE_S`` on average, at random instants, on its own
        thread: sampled at the workload loop's ticks it was correlated with the loop's own work and read far more
        wait than there was on a lightly loaded run (docs/fidelity.md)."""
        rng = random.Random()
        inodes, read_at = set(), 0.0
        while not self._stop.wait(rng.uniform(0.5, 1.5) * BACKLOG_SAMPLE_S):
            if time.monotonic() - read_at > SOCKETS_REFRESH_S:
                inodes, read_at = socket_inodes(), time.monotonic()
            waiting = receive_backlog(inodes=inodes)
            if waiting is not None:
                self.receive_backlog.append(waiting)

    def tick(self) -> None:
        now, cpu = time.time(), ovs_cpu_seconds()
        if cpu is not None:
            self.cpu.append((now, cpu))
        for key, (_sent, _dropped, queued) in switch_qdiscs().items():
            self.backlog[key].append(queued)

    def finish(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2.0)
        self.tick()
        self.t1 = time.time()
        self.qdisc1 = switch_qdiscs()
        self.tcp1 = tcp_counters_by_host(self.tb)

    # -- what was measured
    def ovs_cpu(self) -> Dict[str, Optional[float]]:
        if len(self.cpu) < 2:
            return {"mean": None, "peak": None}
        (ta, ca), (tb, cb) = self.cpu[0], self.cpu[-1]
        peak, j = None, 0
        for t, c in self.cpu:
            while t - self.cpu[j][0] > CPU_WINDOW_S:
                j += 1
            tj, cj = self.cpu[j]
            if t - tj >= 0.5 * CPU_WINDOW_S:  # windows of at least half the length, so one late tick cannot spike
                frac = (c - cj) / (t - tj)
                peak = frac if peak is None else max(peak, frac)
        return {"mean": (cb - ca) / (tb - ta) if tb > ta else None, "peak": peak}

    def emulator_wait_s(self) -> Optional[float]:
        """Mean time a packet waited for the datapath at a switch (Little's law: the mean backlog of the receive
        sockets over the rate at which the switches forwarded, both in the kernel's truesize charge); None when
        the backlog could not be read or nothing was forwarded."""
        return emulator_wait(self.receive_backlog, self._bytes_forwarded(), self.t1 - self.t0)

    def emulator_wait_se_s(self) -> Optional[float]:
        """The standard error of ``emulator_wait_s`` from the spread of the samples (taken at random instants
        far apart compared with a burst, so nearly independent)."""
        if len(self.receive_backlog) < 2:
            return None
        spread = statistics.stdev(self.receive_backlog) / len(self.receive_backlog) ** 0.5
        return emulator_wait([spread], self._bytes_forwarded(), self.t1 - self.t0)

    def _bytes_forwarded(self) -> int:
        return sum(v[0] - self.qdisc0.get(k, (0, 0, 0))[0] for k, v in self.qdisc1.items())

    def classes(self) -> dict:
        """Per class (over all switch ports) and per port-class: drops, bytes, mean queueing delay."""
        wall = max(self.t1 - self.t0, 1e-9)
        per_port = []
        for key, (sent1, dropped1, _q) in self.qdisc1.items():
            sent0, dropped0, _ = self.qdisc0.get(key, (0, 0, 0))
            sent, dropped = sent1 - sent0, dropped1 - dropped0
            samples = self.backlog.get(key) or [0]
            throughput = sent / wall                       # bytes per second
            delay = statistics.mean(samples) / throughput if throughput > 0 else None
            if sent or dropped:
                per_port.append({"port": key[0], "class": key[1], "bytes": sent, "dropped": dropped,
                                 "queueing_delay_ms": None if delay is None else 1e3 * delay})
        by_class = {}
        for c in sorted({p["class"] for p in per_port}):
            rows = [p for p in per_port if p["class"] == c]
            delays = [(p["queueing_delay_ms"], p["bytes"]) for p in rows if p["queueing_delay_ms"] is not None]
            weight = sum(b for _, b in delays)
            by_class[str(c)] = {
                "bytes": sum(p["bytes"] for p in rows), "dropped": sum(p["dropped"] for p in rows),
                # Weighted by bytes: the delay the class's traffic met on an average hop.
                "queueing_delay_ms_mean": sum(d * b for d, b in delays) / weight if weight else None,
                "queueing_delay_ms_max": max((d for d, _ in delays), default=None)}
        worst = sorted((p for p in per_port if p["dropped"]), key=lambda p: -p["dropped"])[:8]
        return {"by_class": by_class, "dropped": sum(p["dropped"] for p in per_port), "most_drops": worst}

    def tcp_by_job(self, jobs: Sequence[JobSpec]) -> Dict[str, Dict[str, float]]:
        out = {}
        for job in jobs:
            counts = {k: sum(self.tcp1.get(h, {}).get(k, 0) - self.tcp0.get(h, {}).get(k, 0) for h in job.hosts)
                      for k in ("out_segs", "retrans_segs", "timeouts")}
            counts["retrans_fraction"] = counts["retrans_segs"] / max(counts["out_segs"], 1)
            out[job.name] = counts
        return out

    def tcp_total(self) -> Dict[str, float]:
        total = {k: sum(self.tcp1[h][k] - self.tcp0.get(h, {}).get(k, 0) for h in self.tcp1)
                 for k in ("out_segs", "retrans_segs", "timeouts")}
        total["retrans_fraction"] = total["retrans_segs"] / max(total["out_segs"], 1)
        return total


def emulator_wait(backlog_samples: Sequence[int], bytes_forwarded: int, wall_s: float) -> Optional[float]:
    """Little's law over the workload: mean bytes waiting (truesize) / bytes forwarded per second (scaled to
    truesize as a full-size frame is charged)."""
    if not backlog_samples or bytes_forwarded <= 0 or wall_s <= 0:
        return None
    rate = bytes_forwarded / wall_s * PACKET_TRUESIZE / FRAME_BYTES
    return statistics.mean(backlog_samples) / rate


def frame_time_s(rate_mbps: float) -> float:
    """A full-size frame's time on a link of ``rate_mbps``."""
    return FRAME_BYTES * 8 / (rate_mbps * 1e6)


def packets_per_op(jobs: Sequence[JobSpec]) -> Dict[str, Dict[str, float]]:
    """Per job: min, p10 and median over its buckets of the data packets one operation puts on a ring hop."""
    out = {}
    for job in jobs:
        per_bucket = [packets_per_hop(b.nbytes, job.workers) for b in job.model.buckets]
        if per_bucket and job.workers > 1:
            out[job.name] = {"min": min(per_bucket), "p10": percentile(per_bucket, 10),
                             "median": statistics.median(per_bucket)}
    return out


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


def rto_share(timeouts: int, iterations: int, iteration_s: Optional[float], rto_min_s: float) -> Optional[float]:
    """Lower bound on the fraction of a job's run its flows spent waiting for retransmission timeouts."""
    if not iteration_s or not iterations:
        return None
    return timeouts * rto_min_s / (iterations * iteration_s)


def verdict(folder: RunFolder, tb, monitor: Optional[FidelityMonitor], job_specs: Sequence[JobSpec],
            jobs=None, min_packets: float = MIN_PACKETS_PER_OP) -> dict:
    """The ``fidelity`` section of a run's summary: every measurement above, ``warnings`` (each one a reason
    the run's figures may be the emulator's) and ``faithful`` (no warning)."""
    warnings: List[str] = []
    notes: List[str] = []    # worth knowing, but not the emulator's failing
    result: dict = {}
    iterations = {j.name: j.iterations for j in job_specs}
    if monitor is not None:
        result["wall_s"] = monitor.t1 - monitor.t0
        cpu = monitor.ovs_cpu()
        result["ovs_vswitchd_cpu"], result["ovs_vswitchd_cpu_peak"] = cpu["mean"], cpu["peak"]
        wait = monitor.emulator_wait_s()
        rates = [rate for _name, _dpid, _port, rate in tb.layout.egress_ports()] if wait is not None else []
        # Judged against the fastest link, where one frame's time is shortest.
        frame_s = frame_time_s(max(rates)) if rates else None
        wait_se = monitor.emulator_wait_se_s() if wait is not None else None
        result["emulator_wait_ms"] = None if wait is None else 1e3 * wait
        result["emulator_wait_frames"] = wait / frame_s if frame_s else None
        result["emulator_wait_frames_se"] = wait_se / frame_s if frame_s and wait_se is not None else None
        result["emulator_wait_samples"] = len(monitor.receive_backlog)
        cpu_high = None
        if cpu["mean"] is not None and cpu["mean"] > OVS_CPU_LIMIT:
            cpu_high = f"ovs-vswitchd used {cpu['mean']:.0%} of a core"
        elif cpu["peak"] is not None and cpu["peak"] > OVS_CPU_PEAK_LIMIT:
            cpu_high = f"ovs-vswitchd used {cpu['peak']:.0%} of a core over {CPU_WINDOW_S:g} s"
        if frame_s is None:
            if cpu_high:
                warnings.append(cpu_high + ": the emulator was saturated, rates and timings may be distorted")
        elif result["emulator_wait_frames"] > EMULATOR_WAIT_LIMIT:
            error = result["emulator_wait_frames_se"]
            warnings.append(f"packets waited {result['emulator_wait_ms']:.2f} ms on average at a switch for Open "
                            f"vSwitch to forward them, {result['emulator_wait_frames']:.2f}"
                            + ("" if error is None else f" (standard error {error:.2f})")
                            + f" of a frame's time on the fastest link (limit {EMULATOR_WAIT_LIMIT:g}): the "
                            "emulator was saturated")
        elif cpu_high:
            notes.append(cpu_high + f", but packets waited only {result['emulator_wait_ms']:.2f} ms for it at a "
                         f"switch ({result['emulator_wait_frames']:.2f} of a frame's time)")
        result["tcp"] = monitor.tcp_total()
        by_job = monitor.tcp_by_job(job_specs)
        result["tcp_by_job"] = by_job
        transport = getattr(tb, "transport", None)
        rto_min_s = (transport.rto_min_ms / 1e3 if transport is not None and transport.rto_min_ms
                     else DEFAULT_RTO_MIN_S)
        mean_iteration = {j.get("name"): j.get("iteration_time_mean_s") for j in jobs or []}
        shares = {name: rto_share(t["timeouts"], iterations.get(name, 0), mean_iteration.get(name), rto_min_s)
                  for name, t in by_job.items()}
        for name, share in shares.items():
            by_job[name]["rto_share"] = share
        over = {name: v for name, v in shares.items() if v is not None and v > RTO_SHARE_LIMIT}
        if over:
            warnings.append("TCP retransmission timeouts took a large part of the run: " + ", ".join(
                f"{name} {by_job[name]['timeouts']} timeouts, >= {v:.0%} of its time" for name, v in over.items())
                + f" (limit {RTO_SHARE_LIMIT:.0%}): the minimum RTO does not scale with the emulated rate")
        result["classes"] = monitor.classes()
        send = dict(getattr(tb, "ovs_send_buffer", None) or {})
        if send:
            # What the sampled backlogs would have charged to Open vSwitch's send socket at their peak.
            per_tick = [sum(v) for v in zip(*monitor.backlog.values())] if monitor.backlog else [0]
            send["peak_charged"] = int(max(per_tick, default=0) * PACKET_TRUESIZE / FRAME_BYTES)
            result["ovs_send_buffer"] = send
            if send.get("bytes") and send["peak_charged"] > SEND_BUFFER_LIMIT * send["bytes"]:
                warnings.append(f"the class FIFOs held up to {send['peak_charged']} bytes against Open vSwitch's "
                                f"{send['bytes']}-byte send buffer: packets were lost inside the switch without "
                                f"any drop counter")
            elif not send.get("ok"):
                notes.append(f"Open vSwitch's send buffer could not be widened ({send.get('error')}): queues "
                             f"deeper than it lose packets silently")
    ppo = packets_per_op(job_specs)
    result["packets_per_op"] = ppo
    small = {name: p["min"] for name, p in ppo.items() if p["min"] < min_packets}
    if small:
        notes.append("operations of a few packets, whose class can hardly matter: " + ", ".join(
            f"{name} {p:.1f}" for name, p in small.items()) + f" data packets per hop (at least "
            f"{min_packets:g} wanted: --min-packets)")
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
        over_rate = [p for p in ports if p["peak_fraction"] > RATE_TOLERANCE and p["measured_by"] == "peer_rx"]
        if over_rate:
            warnings.append(f"{len(over_rate)} ports exceeded their configured rate by more than "
                            f"{RATE_TOLERANCE - 1:.0%} (shaping not effective)")
        result["ports_above_half_rate"] = len([p for p in ports if p["peak_fraction"] > 0.5])
    result["warnings"] = warnings
    if notes:
        result["notes"] = notes
    result["faithful"] = not warnings
    for w in warnings:
        LOG.warning("FIDELITY: %s", w)
    return result
