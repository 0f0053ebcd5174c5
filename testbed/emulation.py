"""The emulation engine: one run on Mininet, Open vSwitch, the Ryu controller and real TCP, into a results folder.

``run(args, resolved)`` takes a plan that cli/run.py has checked (nothing here validates flags) and goes through
its phases, each printed as it starts: fabric and controller start, all-pairs reachability, a priority check
(two flows in different classes through one congested port), the scenario's training jobs (ring all-reduce over
TCP), then the summary. Everything is torn down on every exit path (normal end, error, Ctrl-C, SIGTERM); after a
SIGKILL the next run removes what was left (``clean_stale``).
"""
from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import List, Optional

from core.transport import available_congestion_controls
from experiment.exits import EXIT_FAILED, EXIT_INTERRUPTED, BadInput, Interrupted, outcome, raise_if_signalled
from testbed import ovs, state

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG = logging.getLogger("flux.run")


def run_id_of(args, scenario_name: str) -> str:
    """The run's folder name: given, or the time, scheduler, scenario and seed (a ``module:Class`` scheduler's
    punctuation made safe for a folder name)."""
    scheduler = re.sub(r"[^A-Za-z0-9_+-]+", "-", args.scheduler)
    return args.run_id or "{}-{}-{}-s{}".format(time.strftime("%Y%m%d-%H%M%S"), scheduler, scenario_name, args.seed)


def preflight(datapath: str = "auto", congestion_control: Optional[str] = None) -> None:
    if os.geteuid() != 0:
        raise BadInput("must run as root (Mininet needs it): sudo python testbed/run.py ...")
    for tool in ("ovs-vsctl", "mnexec", "tc", "ip", "ethtool", "ping"):
        if shutil.which(tool) is None:
            raise BadInput(f"{tool} not found; run: sudo bash scripts/install.sh")
    r = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True, text=True)
    if r.returncode != 0:
        raise BadInput("Open vSwitch is not running (ovs-vsctl show failed); run: sudo bash scripts/install.sh")
    if datapath == "kernel" and not os.path.isdir("/sys/module/openvswitch"):
        raise BadInput("--datapath kernel: the openvswitch kernel module is not loaded (use --datapath user)")
    offered = available_congestion_controls()
    if congestion_control and offered and congestion_control not in offered:
        raise BadInput(f"--congestion-control {congestion_control}: this kernel offers {', '.join(offered)}")
    active = state.active_run()
    if active:
        raise BadInput(f"another run is active (runner pid {active['runner_pid']}, {active.get('out_dir')})")


def clean_stale() -> List[str]:
    st = state.load()
    if not st:
        return []
    return state.remove(st)


# ------------------------------------------------------------------------------------------------ provenance
def versions() -> dict:
    from experiment.results import code_version

    def cmd(args):
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
        except Exception:
            return None

    def pkg(name):
        try:
            from importlib.metadata import version
            return version(name)
        except Exception:
            return None

    return {"python": platform.python_version(), "kernel": platform.release(),
            "openvswitch": cmd(["ovs-vsctl", "--version"]), "ryu": pkg("ryu"), "mininet": pkg("mininet"),
            "eventlet": pkg("eventlet"), "numpy": pkg("numpy"), "testbed": pkg("flux-testbed"),
            **code_version(PROJECT_DIR)}


def run(args, resolved: dict) -> int:
    from testbed import fidelity, jobs as training, reconstruct
    from testbed.fabric import Testbed, TestbedError
    from experiment.results import JobSummary, RunFolder, RunSummary

    scenario = resolved["scenario"]
    run_id = run_id_of(args, scenario.name)
    out = os.path.abspath(args.out or os.path.join(PROJECT_DIR, "results", run_id))
    folder = RunFolder(out)
    config = {
        "engine": "emulation",
        "run_id": run_id, "scheduler": args.scheduler, "scheduler_params": resolved["params"],
        "scenario_file": resolved["scenario_path"], "scenario": scenario.to_dict(), "seed": args.seed,
        "fabric": vars(resolved["spec"]) | {"oversubscription": resolved["spec"].oversubscription},
        "poll_interval_s": args.poll_interval, "class_floor": args.class_floor, "queue_ms": args.queue_ms,
        "class_mode": args.class_mode, "transport": resolved["transport"].to_dict(),
        "iterations_override": args.iterations, "time_limit_s": args.time_limit,
        "faults": [f.text for f in resolved["faults"]], "controller_recovery": args.controller_recovery,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        # Every flag by name, so that a sweep can read back any axis without knowing the keys above.
        "flags": {name.replace("_", "-"): value for name, value in sorted(vars(args).items())},
    }
    folder.write_config(config)
    summary = RunSummary(run_id=run_id, config=config, versions=versions(), seed=args.seed,
                         extra={"started_at": time.time()})
    spec = resolved["spec"]
    LOG.info("run %s -> %s", run_id, out)
    datapath = None if args.datapath == "auto" else args.datapath
    tb = Testbed(spec, out, scheduler=args.scheduler, scheduler_params=resolved["params"],
                 jobs=[] if args.no_workload else resolved["jobs"], poll_interval_s=args.poll_interval,
                 class_floor=args.class_floor, queue_ms=args.queue_ms, run_id=run_id, datapath=datapath,
                 class_mode=args.class_mode, restart_controllers=args.controller_recovery == "restart",
                 transport=resolved["transport"])
    code = EXIT_FAILED
    unexpected = False
    try:
        granularity = scenario.granularity
        if granularity.get("wall_time_factor", 1.0) > 1.0 + 1e-9:
            LOG.info("granularity: time scale raised %.2fx (%.3g -> %.3g) so that every operation has %g data "
                     "packets per hop", granularity["wall_time_factor"], granularity["time_scale_before"],
                     granularity["time_scale"], granularity["min_packets_per_op"])
        if not granularity.get("met", True):
            LOG.warning("granularity: operations below %g data packets per hop remain: %s",
                        granularity["min_packets_per_op"], ", ".join(
                            f"{name} {p:.1f}" for name, p in granularity["smallest_packets_per_op"].items()
                            if p < granularity["min_packets_per_op"]))
        LOG.info("[1/4] fabric: %s, %d hosts, host %g / fabric %g Mbit/s "
                 "(oversubscription %.2f:1), %s datapath, scheduler %s", spec.describe(), spec.hosts,
                 spec.host_rate_mbps, spec.fabric_rate_mbps, spec.oversubscription, tb.datapath, args.scheduler)
        tb.start()
        raise_if_signalled()
        summary.timings = dict(tb.timings)
        summary.extra["datapath"] = tb.datapath
        # The reconstruction's error bound needs how stale a flow counter read can be (testbed/reconstruct.py).
        summary.extra["flow_counter_refresh_s"] = ovs.flow_counter_refresh_s()
        LOG.info("      up in %.1f s (build %.1f, start+controller %.1f)", tb.timings["build_s"]
                 + tb.timings["start_s"], tb.timings["build_s"], tb.timings["start_s"])
        checks = {}
        if not args.skip_checks:
            LOG.info("[2/4] checks: all-pairs reachability, priority classes on a congested port")
            failures = tb.check_reachability()
            checks["reachability"] = {"pairs": spec.hosts * (spec.hosts - 1), "failed": failures}
            if failures:
                raise TestbedError(f"{len(failures)} host pairs unreachable: {', '.join(failures[:8])}")
            pair = tb.priority_pair()
            pair["ok"] = pair["high_share"] >= 0.8
            checks["priority"] = pair
            LOG.info("      reachability ok (%d pairs); class 7 %.2f vs class 1 %.2f Mbit/s on a %g Mbit/s port "
                     "(share %.2f)", spec.hosts * (spec.hosts - 1), pair["high"]["goodput_mbps"],
                     pair["low"]["goodput_mbps"], spec.host_rate_mbps, pair["high_share"])
            if not pair["ok"]:
                raise TestbedError(f"priority classes do not separate traffic: high class got only "
                                   f"{pair['high_share']:.2f} of the port")
        else:
            LOG.info("[2/4] checks skipped")
        summary.checks = checks
        raise_if_signalled()
        if args.no_workload:
            LOG.info("[3/4] no workload (--no-workload)")
        else:
            jobs_text = ", ".join(f"{j.name} ({j.model.name}, {j.workers} workers, {j.iterations} it)"
                                  for j in resolved["jobs"])
            LOG.info("[3/4] workload: %s", jobs_text)
            monitor = fidelity.FidelityMonitor(tb)
            monitor.start()
            workload = training.run_jobs(tb, resolved["jobs"], folder, seed=args.seed,
                                         time_limit_s=args.time_limit, progress=not args.quiet,
                                         faults=resolved["faults"], monitor=monitor,
                                         interrupted=raise_if_signalled)
            monitor.finish()
            summary.jobs = [JobSummary.from_dict(j) for j in workload.pop("jobs")]
            summary.cluster = workload.pop("cluster")
            summary.extra.update(workload)
            summary.fidelity = fidelity.verdict(folder, tb, monitor, resolved["jobs"], summary.jobs,
                                                min_packets=scenario.granularity.get("min_packets_per_op") or 0)
        # Whatever happened to the controllers anywhere in the run is said, and fails it: figures taken while the
        # scheduler was dead are not the scheduler's.
        problems = list(summary.extra.get("controller_failure") or []) + tb.controller_problems()
        summary.controller = tb.controller_stats()
        problems += summary.controller.get("errors", [])
        failures = problems + (["workers failed: " + ", ".join(summary.extra["workers_failed"])]
                               if summary.extra.get("workers_failed") else [])
        if summary.extra.get("timed_out"):
            failures.append(f"time limit of {args.time_limit:g} s reached")
        summary.ok, error, code = outcome(failures, summary.faithful)
        summary.error = error or summary.error
    except Interrupted as exc:
        LOG.error("interrupted (%s); tearing down", exc)
        summary.error = f"interrupted: {exc}"
        code = EXIT_INTERRUPTED
    except TestbedError as exc:
        LOG.error("%s", exc)
        summary.error = str(exc)
    except Exception as exc:  # a bug or an unforeseen failure: one line here, the traceback in the run folder
        import traceback
        unexpected = True
        with open(folder.file(RunFolder.ERROR_LOG), "w") as f:
            traceback.print_exc(file=f)
        LOG.error("run failed: %s: %s (traceback in %s)", type(exc).__name__, exc, folder.file(RunFolder.ERROR_LOG))
        summary.error = f"{type(exc).__name__}: {exc}"
    finally:
        # A second Ctrl-C must not cut the teardown short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        LOG.info("[4/4] teardown")
        # After a signal the user wants the terminal back, and after an unforeseen error Mininet's shells may be
        # stuck mid-command: the fast teardown then (a few seconds at most). The summary is written whatever
        # the teardown does.
        try:
            tb.stop(fast=code == EXIT_INTERRUPTED or unexpected)
        except Exception as exc:
            LOG.error("teardown failed: %s (the next run removes what is left)", exc)
            summary.extra["teardown_error"] = str(exc)
        summary.timings = dict(tb.timings)
        summary.extra["finished_at"] = time.time()
        if summary.jobs and code != EXIT_INTERRUPTED:
            try:
                summary.apply_reconstruction(reconstruct.analyse_run(folder, summary))
            except Exception as exc:  # analysis must never hide the run's own result
                LOG.warning("analysis failed: %s", exc)
                summary.extra["analysis_error"] = str(exc)
        folder.write_summary(summary)
    training.print_summary(summary, out)
    return code
