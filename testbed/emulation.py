"""The emulation engine: one run on Mininet, Open vSwitch, the Ryu controller and real TCP, into a results folder.

``run(plan)`` takes a plan (experiment/plan.py) that cli/run.py has checked (nothing here validates flags) and
goes through its phases, each printed as it starts: fabric and controller start, all-pairs reachability, a
priority check (two flows in different classes through one congested port), the scenario's training jobs (ring
all-reduce over TCP), then the summary. Everything is torn down on every exit path (normal end, error, Ctrl-C,
SIGTERM); after a SIGKILL the next run removes what was left (``clean_stale``).
"""
from __future__ import annotations

import logging
import os
import platform
import shutil
import signal
import subprocess
import time
from typing import List, Optional

from core.transport import available_congestion_controls
from experiment.exits import EXIT_FAILED, EXIT_INTERRUPTED, BadInput, Interrupted, outcome, raise_if_signalled
from experiment.plan import RunPlan
from testbed import ovs, state

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG = logging.getLogger("flux.run")


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
def versions(controller_framework: str = "ryu") -> dict:
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
            "openvswitch": cmd(["ovs-vsctl", "--version"]), "ryu": pkg("ryu"), "os-ken": pkg("os-ken"),
            "controller_framework": controller_framework, "mininet": pkg("mininet"),
            "eventlet": pkg("eventlet"), "numpy": pkg("numpy"), "testbed": pkg("flux-testbed"),
            **code_version(PROJECT_DIR)}


def run(plan: RunPlan) -> int:
    from experiment.results import JobSummary, RunFolder, RunSummary
    from testbed import fidelity, jobs as training, reconstruct
    from testbed.fabric import Testbed, TestbedError

    scenario, emu, out = plan.scenario, plan.emulation, plan.out
    folder = RunFolder(out)
    config = plan.emulation_config()
    folder.write_config(config)
    summary = RunSummary(run_id=plan.run_id, config=config, versions=versions(emu.controller_framework),
                         seed=plan.seed,
                         extra={"started_at": time.time()})
    spec = plan.spec
    LOG.info("run %s -> %s", plan.run_id, out)
    datapath = None if emu.datapath == "auto" else emu.datapath
    tb = Testbed(spec, out, scheduler=plan.scheduler, scheduler_params=plan.scheduler_params,
                 jobs=[] if emu.no_workload else plan.jobs, poll_interval_s=emu.poll_interval_s,
                 class_floor=plan.class_floor, queue_ms=plan.queue_ms, run_id=plan.run_id, datapath=datapath,
                 class_mode=plan.class_mode, restart_controllers=emu.controller_recovery == "restart",
                 transport=plan.transport, controller_framework=emu.controller_framework)
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
                 spec.host_rate_mbps, spec.fabric_rate_mbps, spec.oversubscription, tb.datapath, plan.scheduler)
        tb.start()
        raise_if_signalled()
        summary.timings = dict(tb.timings)
        summary.extra["datapath"] = tb.datapath
        # The reconstruction's error bound needs how stale a flow counter read can be (testbed/reconstruct.py).
        summary.extra["flow_counter_refresh_s"] = ovs.flow_counter_refresh_s()
        LOG.info("      up in %.1f s (build %.1f, start+controller %.1f)", tb.timings["build_s"]
                 + tb.timings["start_s"], tb.timings["build_s"], tb.timings["start_s"])
        checks = {}
        if not emu.skip_checks:
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
        if emu.no_workload:
            LOG.info("[3/4] no workload (--no-workload)")
        else:
            jobs_text = ", ".join(f"{j.name} ({j.model.name}, {j.workers} workers, {j.iterations} it)"
                                  for j in plan.jobs)
            LOG.info("[3/4] workload: %s", jobs_text)
            monitor = fidelity.FidelityMonitor(tb)
            monitor.start()
            workload = training.run_jobs(tb, plan.jobs, folder, seed=plan.seed,
                                         time_limit_s=plan.time_limit_s, progress=not plan.quiet,
                                         faults=plan.faults, monitor=monitor,
                                         interrupted=raise_if_signalled)
            monitor.finish()
            summary.jobs = [JobSummary.from_dict(j) for j in workload.pop("jobs")]
            summary.cluster = workload.pop("cluster")
            summary.extra.update(workload)
            summary.fidelity = fidelity.verdict(folder, tb, monitor, plan.jobs, summary.jobs,
                                                min_packets=scenario.granularity.get("min_packets_per_op") or 0)
        # Whatever happened to the controllers anywhere in the run is said, and fails it: figures taken while the
        # scheduler was dead are not the scheduler's.
        problems = list(summary.extra.get("controller_failure") or []) + tb.controller_problems()
        summary.controller = tb.controller_stats()
        problems += summary.controller.get("errors", [])
        failures = problems + (["workers failed: " + ", ".join(summary.extra["workers_failed"])]
                               if summary.extra.get("workers_failed") else [])
        if summary.extra.get("timed_out"):
            failures.append(f"time limit of {plan.time_limit_s:g} s reached")
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
