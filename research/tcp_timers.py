#!/usr/bin/env python3
"""A job's TCP retransmission timers during an emulation run, sampled from its workers' sockets.

Question: What are a job's TCP retransmission timers during an emulation run under strict priority?
Answer: Raised by the starvations themselves: 0.3-0.6 s at the median and up to seconds under Crux (0.25 s under
ECMP), where the twin's timer is 0.2 s, so starved flows time out less often than the twin counts and each timeout
costs more; raising the twin's timers alike (rto_rttvar) was tried and not adopted.
Cited in: docs/twin-log.md, What a timeout costs under strict priority, measured; docs/twin.md, Limits;
docs/usage.md, Benchmarks.

    sudo python research/tcp_timers.py --job bert_b [--interval 0.05] [--out FILE.json] -- RUN_ARGS...

Runs ``testbed/run.py RUN_ARGS`` (an emulation run: its flags as usual, ``--out`` included) and, while it runs,
reads ``ss -tin`` in the network namespace of each of the job's workers every ``--interval`` seconds: every
established connection's retransmission timer (``rto``), smoothed RTT and its variance, unacknowledged segments
and backoff. Linux sets the timer to the smoothed RTT plus the larger of four mean deviations and 200 ms, so a
connection whose packets sometimes wait in a FIFO (a class starved by the classes above it) has timers far above
200 ms, and each of its timeouts costs that much (docs/twin-log.md, What a timeout costs under strict priority).

The JSON (stdout, or ``--out``) has, over the samples of connections with data in flight: the timer's quantiles,
the share of samples above 0.3 s and with a backed-off timer, and per second of the job's run (from its workers'
start) the median and largest timer and the median smoothed RTT; and the job's figures from the run's
``summary.json`` (GPU utilisation, TCP timeouts). Exits with the run's exit code. Needs root (as the run does);
it ends only the run it started.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Tuple

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


RUN_PY = os.path.join(PROJECT_DIR, "testbed", "run.py")
_FIELDS = ("rto", "unacked", "backoff", "retrans")
_RTT = re.compile(r"\brtt:([0-9.]+)/([0-9.]+)")


class BadInput(Exception):
    pass


class _Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def parse_ss(text: str) -> List[Dict[str, float]]:
    """The connections of one ``ss -tinH`` output: ``rto_ms``, ``srtt_ms``, ``rttvar_ms``, ``unacked``,
    ``backoff`` and ``retrans`` (segments being retransmitted) where ss printed them, and ``peer``."""
    conns: List[Dict[str, float]] = []
    current: Optional[Dict[str, float]] = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            current = {"peer": parts[-1] if parts else ""}
            conns.append(current)
            continue
        if current is None:
            continue
        for key in _FIELDS:
            m = re.search(r"\b" + key + r":([0-9.]+)(?:/([0-9.]+))?", line)
            if m:
                name = "rto_ms" if key == "rto" else key
                current[name] = float(m.group(1))
        m = _RTT.search(line)
        if m:
            current["srtt_ms"], current["rttvar_ms"] = float(m.group(1)), float(m.group(2))
    return conns


def summarize(samples: Iterable[Tuple[float, Dict[str, float]]], start: float) -> Dict[str, object]:
    """Quantiles of the timer over the samples ``(time, connection)`` with data in flight, and per second from
    ``start``."""
    busy = [(t, c) for t, c in samples if c.get("unacked", 0) > 0 and "rto_ms" in c]
    if not busy:
        return {"samples_in_flight": 0}
    rto = sorted(c["rto_ms"] for _t, c in busy)

    def q(p: float) -> float:
        return rto[min(len(rto) - 1, int(p * len(rto)))]

    per_second: Dict[int, List[Dict[str, float]]] = {}
    for t, c in busy:
        per_second.setdefault(int(t - start), []).append(c)
    return {
        "samples_in_flight": len(busy),
        "rto_ms": {"p10": q(0.10), "median": q(0.5), "p90": q(0.9), "max": rto[-1]},
        "share_above_300ms": sum(1 for r in rto if r > 300) / len(rto),
        "share_backed_off": sum(1 for _t, c in busy if c.get("backoff", 0) > 0) / len(busy),
        "per_second": [{"second": s,
                        "samples": len(cs),
                        "rto_ms_median": statistics.median(c["rto_ms"] for c in cs),
                        "rto_ms_max": max(c["rto_ms"] for c in cs),
                        "srtt_ms_median": statistics.median(c.get("srtt_ms", 0.0) for c in cs)}
                       for s, cs in sorted(per_second.items())],
    }


def _option(args: List[str], name: str) -> Optional[str]:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def worker_pids(job: str) -> List[int]:
    """Processes of the job's workers (``workloads.worker --job-file .../jobs/JOB.json``)."""
    pids = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"workloads.worker" in argv and any(a.endswith(f"/jobs/{job}.json".encode()) for a in argv):
            pids.append(int(path.split("/")[2]))
    return sorted(pids)


def sample(pid: int) -> List[Dict[str, float]]:
    r = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-tinH", "state", "established"],
                       capture_output=True, text=True)
    return parse_ss(r.stdout) if r.returncode == 0 else []


def job_start(out: str, job: str) -> Optional[float]:
    try:
        with open(os.path.join(out, "workers", f"{job}-r0.jsonl")) as f:
            return float(json.loads(f.readline())["start_at"])
    except (OSError, ValueError, KeyError):
        return None


def job_figures(out: str, job: str) -> Dict[str, object]:
    try:
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return {}
    figures: Dict[str, object] = {"run_ok": summary.get("ok")}
    for j in summary.get("jobs", []):
        if j.get("name") == job:
            figures["gpu_utilization"] = j.get("gpu_utilization")
    tcp = ((summary.get("fidelity") or {}).get("tcp_by_job") or {}).get(job) or {}
    figures["tcp_timeouts"] = tcp.get("timeouts")
    figures["faithful"] = (summary.get("fidelity") or {}).get("faithful")
    return figures


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                usage="sudo python research/tcp_timers.py --job NAME [options] -- RUN_ARGS...")
    p.add_argument("--job", required=True, help="the job whose workers' sockets to sample (its name in the scenario)")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    p.add_argument("--out", default=None, help="write the JSON here instead of stdout")
    args = p.parse_args(argv)
    try:
        if args.interval <= 0:
            raise BadInput(f"--interval must be positive (got {args.interval})")
        if not run_args:
            raise BadInput("give the run's flags after --, for example: -- --scheduler crux --out /tmp/run")
        if _option(run_args, "--engine") not in (None, "emulation"):
            raise BadInput("the timers are the emulation's: --engine fluid has no sockets")
        out = _option(run_args, "--out")
        if out is None:
            raise BadInput("give the run an --out folder (its workers' logs give the job's start)")
        if os.geteuid() != 0:
            raise BadInput("needs root (the run does, and so does reading its hosts' sockets): sudo python "
                           "research/tcp_timers.py ...")
    except BadInput as e:
        print(f"tcp_timers.py: {e}", file=sys.stderr)
        return 2

    # The run's progress goes to stderr: this command's output is the JSON.
    run = subprocess.Popen([sys.executable, RUN_PY, *run_args], stdout=sys.stderr)
    samples: List[Tuple[float, Dict[str, float]]] = []

    def stop(signum, _frame):
        raise _Stopped(signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        while run.poll() is None:
            t = time.time()
            for pid in worker_pids(args.job):
                samples.extend((t, c) for c in sample(pid))
            time.sleep(max(0.0, args.interval - (time.time() - t)))
    except (KeyboardInterrupt, _Stopped) as e:
        # The runner cleans up on SIGINT and SIGTERM. A Ctrl-C reached it too (same process group); a signal
        # sent to this process alone is passed on.
        signum = e.signum if isinstance(e, _Stopped) else signal.SIGINT
        try:
            run.wait(timeout=2)
        except subprocess.TimeoutExpired:
            run.send_signal(signum)
    code = run.wait()
    start = job_start(out, args.job) or (samples[0][0] if samples else 0.0)
    result = {"command": "research/tcp_timers.py " + " ".join(sys.argv[1:]),
              "job": args.job, "interval_s": args.interval, "run_exit_code": code,
              "job_figures": job_figures(out, args.job), "timers": summarize(samples, start)}
    text = json.dumps(result, indent=1)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if not samples:
        print(f"tcp_timers.py: no connection of {args.job!r} was sampled (is it a job of the scenario?)",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
