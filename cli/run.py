"""Run one experiment: fabric + controller + multi-tenant training workload, then a summary.

    sudo python testbed/run.py --scheduler flux [--scenario FILE] [--out DIR] [topology flags]

Phases (each printed as it starts): preflight checks, stale-state cleanup, fabric and controller start,
all-pairs reachability, a priority check (two flows in different classes through one congested port), the
scenario's training jobs (ring all-reduce over TCP), then the summary. Everything is torn down on every exit
path (normal end, error, Ctrl-C, SIGTERM); after a SIGKILL the next run removes what was left.

Writes results/<run-id>/ (see results/README.md). Exit codes: 0 success; 1 failed run (workers failed, a
controller died or lost its switches, time limit, or an error); 2 bad input or environment (nothing is started
then); 3 the run completed but the emulation was not faithful (fidelity warnings: do not publish its figures);
130 interrupted.
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import List, Optional, Tuple

from core import queues
from core.config import DEFAULT_POLL_INTERVAL_S
from core.faults import check_targets, parse_faults
from core.fabric import DEFAULT_FATTREE_K, TOPOLOGIES, FabricLayout, FabricSpec
from core.transport import CONGESTION_CONTROLS, DEFAULT_PROFILE, PROFILES, available_congestion_controls, profile
from testbed import ovs, qos, state

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG = logging.getLogger("flux.run")

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNFAITHFUL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# One path component that is not "." or "..": a run id names a folder under results/.
SAFE_RUN_ID = re.compile(r"(?!\.\.?$)[A-Za-z0-9._+-]{1,128}")


class BadInput(Exception):
    """Bad flags, scenario or environment: reported in one line, exit 2, nothing started."""


class Interrupted(Exception):
    """SIGTERM or SIGINT during a run."""


# The last signal received. The handler raises Interrupted wherever the runner is, but library code that catches
# every Exception (a host shell's read in Mininet, for one) can swallow it: the phases check this as well.
_signalled: List[str] = []


def raise_if_signalled() -> None:
    if _signalled:
        raise Interrupted(_signalled[-1])


def scheduler_names() -> List[str]:
    from controller.schedulers.registry import scheduler_names as names
    return names()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run.py",
        description="Run one multi-tenant training experiment on an emulated fabric (leaf-spine or fat-tree) under one "
                    "scheduler, and write results/<run-id>/ (summary.json, counter time series, worker logs).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Exit codes: 0 ok; 1 failed run (workers, a controller, the time limit); 2 bad input; 3 completed "
               "but not faithful (see the fidelity warnings); 130 interrupted. "
               "Example: sudo python testbed/run.py --scheduler flux --scenario workloads/scenarios/headline.yaml")
    g = p.add_argument_group("experiment")
    g.add_argument("--engine", choices=["emulation", "fluid"], default="emulation",
                   help="emulation: Mininet, Open vSwitch, Ryu and real TCP (root); fluid: the flow-level twin "
                        "(twin/, no root, same flags and results folder; docs/twin.md says what it models)")
    g.add_argument("--twin-model", default="calibrated", metavar="NAME",
                   help="fluid engine only: ideal, calibrated, physical (calibrated without its fitted delays), "
                        "or a JSON file of model parameters (twin/model.py)")
    g.add_argument("--twin-set", action="append", default=[], metavar="TERM=VALUE",
                   help="fluid engine only, repeatable: one model term over --twin-model's, e.g. --twin-set "
                        "progress_weight=2 (the terms are twin/model.py's ModelParams; docs/twin.md)")
    g.add_argument("--twin-hash", choices=["ovs", "salted"], default="ovs",
                   help="fluid engine only: ECMP paths by Open vSwitch's own hash, as the emulation's switches choose "
                        "them (the same in every run), or by a hash salted with --seed (to see the spread)")
    g.add_argument("--twin-ring-model", choices=["auto", "steps", "pipelined"], default="auto",
                   help="fluid engine only: every ring step simulated (steps, the model checked against the "
                        "emulation), each bucket's ring as one flow (pipelined, for scale), or steps up to 128 GPUs "
                        "and pipelined above (auto)")
    g.add_argument("--scheduler", default="ecmp", metavar="NAME",
                   help="scheduling policy: ecmp, bytescheduler, crux, flux or flux-v1 (docs/schedulers.md)")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="scheduler parameter (repeatable), e.g. --param alpha=0.7; see docs/schedulers.md")
    g.add_argument("--scenario", default=None, metavar="FILE",
                   help="scenario file (jobs and placement); default: workloads/scenarios/default.yaml")
    g.add_argument("--seed", type=int, default=1, help="seed for placement and gradient data")
    g.add_argument("--min-packets", type=float, default=None, metavar="K",
                   help="data packets per ring hop of the smallest operation (default: the scenario's "
                        "min_packets_per_op, 20 unless it says otherwise; 0 turns the budget off): buckets are "
                        "merged, and under time_scale auto the time scale raised, to meet it")
    g.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="override every job's iteration count")
    g.add_argument("--no-workload", action="store_true",
                   help="only bring the fabric up and run the checks (no training jobs)")
    g.add_argument("--time-limit", type=float, default=900.0, metavar="S",
                   help="abort the workload after this many seconds")
    g.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="a fault during the workload (repeatable; added to the scenario's faults:), e.g. "
                        "'link lf1-sp1 down at 5', 'link lf1-sp1 up at 12', 'switch sp2 down at 8', "
                        "'controller scheduler kill at 10' (seconds from the workload's start)")
    t = p.add_argument_group("fabric")
    t.add_argument("--topology", choices=TOPOLOGIES, default="leafspine",
                   help="fabric family: leafspine (--spines, --leaves, --hosts-per-leaf) or a 3-tier k-ary fattree "
                        "(--k)")
    # (No default shown for the shape flags: each applies to one family, and giving it for the other is an error.)
    leafspine = FabricSpec()
    t.add_argument("--spines", type=int, default=argparse.SUPPRESS,
                   help=f"leaf-spine: number of spine switches (default {leafspine.spines})")
    t.add_argument("--leaves", type=int, default=argparse.SUPPRESS,
                   help=f"leaf-spine: number of leaf switches (default {leafspine.leaves})")
    t.add_argument("--hosts-per-leaf", type=int, default=argparse.SUPPRESS,
                   help=f"leaf-spine: hosts (one GPU worker each) per leaf (default {leafspine.hosts_per_leaf})")
    t.add_argument("--k", type=int, default=argparse.SUPPRESS,
                   help=f"fat-tree: arity, even (default {DEFAULT_FATTREE_K}: 16 hosts, 20 switches)")
    t.add_argument("--host-rate", type=float, default=10.0, metavar="MBPS", help="host-leaf link rate, Mbit/s")
    t.add_argument("--fabric-rate", type=float, default=10.0, metavar="MBPS",
                   help="switch-to-switch link rate, Mbit/s")
    t.add_argument("--class-floor", type=float, default=queues.DEFAULT_FLOOR, metavar="F",
                   help="guaranteed share of the link per priority class (keeps starved TCP flows alive)")
    t.add_argument("--class-mode", choices=queues.CLASS_MODES, default="strict",
                   help="strict: class 7 first, each class guaranteed --class-floor; weighted: class c gets 2^c/255 "
                        "of a busy link and none starves")
    t.add_argument("--queue-ms", type=float, default=queues.DEFAULT_QUEUE_MS, metavar="MS",
                   help="per-class FIFO length in milliseconds of the link rate")
    t.add_argument("--transport", choices=list(PROFILES), default=DEFAULT_PROFILE,
                   help="how the hosts' TCP and the class FIFOs stand in for the fabric's transport: tcp (FIFOs of "
                        "--queue-ms that drop, the kernel's TCP) or lossless (RoCE/PFC-like: bounded windows, FIFOs "
                        "that cannot overflow, no timeouts for starved flows); see core/transport.py")
    t.add_argument("--congestion-control", choices=list(CONGESTION_CONTROLS), default=None, metavar="NAME",
                   help="TCP congestion control of every host (cubic, reno or bbr; default: the profile's, cubic), "
                        "set on the hosts' routes so that the machine's own default does not leak in")
    t.add_argument("--datapath", choices=["auto", "kernel", "user"], default="auto",
                   help="OVS datapath; auto = kernel if the openvswitch module is loaded, else userspace")
    c = p.add_argument_group("controller and output")
    c.add_argument("--controller-recovery", choices=["restart", "fail"], default="restart",
                   help="a controller that dies or hangs mid-run: restart it and record the gap, or fail the run")
    c.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL_S, metavar="S",
                   help="port and flow counter polling interval of the controller, seconds")
    c.add_argument("--out", default=None, metavar="DIR",
                   help="results directory for this run (default results/<run-id>)")
    c.add_argument("--run-id", default=None, help="name of the run (default: time-scheduler-scenario-seed)")
    c.add_argument("--skip-checks", action="store_true", help="skip the reachability and priority checks")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar, warnings only")
    return p


# ------------------------------------------------------------------------------------------------ validation
def validate(args) -> dict:
    """Check everything that can be checked before anything starts. Returns resolved pieces."""
    names = scheduler_names()
    if args.scheduler not in names:
        raise BadInput(f"unknown scheduler {args.scheduler!r}; known: {', '.join(names)}")
    from controller.schedulers.registry import parse_params
    try:
        params = parse_params(args.param)
    except ValueError as exc:
        raise BadInput(f"--param: {exc}")
    try:
        spec = fabric_spec(args)
        if args.engine == "fluid":
            import twin
            spec.validate(max_hosts=twin.MAX_HOSTS)
        else:
            spec.validate()
        for rate in sorted({args.host_rate, args.fabric_rate}):
            qos.tree_commands("x", rate, args.class_floor, args.queue_ms, args.class_mode)
    except ValueError as exc:
        raise BadInput(str(exc))
    if args.engine == "fluid":
        from twin.model import parse_model_overrides, resolve_model
        try:
            parse_model_overrides(args.twin_set, resolve_model(args.twin_model))
        except ValueError as exc:
            raise BadInput(f"--twin-model/--twin-set: {exc}")
    if args.run_id is not None and not SAFE_RUN_ID.fullmatch(args.run_id):
        raise BadInput(f"--run-id {args.run_id!r}: use one folder name of letters, digits and . _ + - "
                       "(it names results/<run-id>/)")
    if args.out is not None:
        check_out_dir(args.out)
    if not 0.01 <= args.poll_interval <= 10:
        raise BadInput(f"--poll-interval must be between 0.01 and 10 s (got {args.poll_interval})")
    if args.iterations is not None and args.iterations < 1:
        raise BadInput(f"--iterations must be >= 1 (got {args.iterations})")
    if args.time_limit <= 0:
        raise BadInput("--time-limit must be positive")
    layout = FabricLayout.from_spec(spec)
    from workloads.scenario import ScenarioError, default_scenario_path, load_scenario
    path = args.scenario or default_scenario_path()
    if not os.path.isfile(path):
        raise BadInput(f"--scenario: no such file: {path}")
    try:
        scenario = load_scenario(path)
        if args.min_packets is not None and args.min_packets < 0:
            raise BadInput(f"--min-packets must be >= 0 (got {args.min_packets:g})")
        resolved = scenario.resolve(layout.host_tuples(), spec.host_rate_mbps, min_packets=args.min_packets)
    except (ScenarioError, ValueError) as exc:
        raise BadInput(str(exc))
    try:
        faults = parse_faults(list(resolved.faults) + list(args.fault))
        check_targets(faults, layout)
    except ValueError as exc:
        raise BadInput(str(exc))
    if faults and args.no_workload:
        raise BadInput("faults happen during the workload: drop --no-workload")
    if args.engine == "fluid" and (faults or args.no_workload):
        raise BadInput("the fluid engine runs workloads without faults (no --fault, no faults:, no --no-workload)")
    jobs = resolved.jobs
    if args.iterations is not None:
        import dataclasses
        jobs = [dataclasses.replace(j, iterations=args.iterations) for j in jobs]
    from controller.schedulers.registry import make_scheduler
    try:
        make_scheduler(args.scheduler, layout.view(), jobs, params)
    except ValueError as exc:
        raise BadInput(str(exc))
    try:
        transport = profile(args.transport, args.congestion_control)
    except ValueError as exc:
        raise BadInput(str(exc))
    return {"spec": spec, "layout": layout, "params": params, "scenario_path": os.path.abspath(path),
            "scenario": resolved, "jobs": jobs, "faults": faults, "transport": transport}


def fabric_spec(args) -> FabricSpec:
    """The fabric of the flags; records the shape actually used back into ``args`` (and so into config.flags).
    ValueError when a shape flag of the other family is given."""
    shape = {name: getattr(args, name, None) for name in ("spines", "leaves", "hosts_per_leaf", "k")}
    if args.topology == "fattree":
        given = [f"--{n.replace('_', '-')}" for n in ("spines", "leaves", "hosts_per_leaf") if shape[n] is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: leaf-spine only; a fat-tree's shape is --k")
        spec = FabricSpec.fattree(DEFAULT_FATTREE_K if shape["k"] is None else shape["k"],
                                  args.host_rate, args.fabric_rate)
        args.spines = args.leaves = args.hosts_per_leaf = None
        args.k = spec.k
        return spec
    if shape["k"] is not None:
        raise ValueError("--k: fat-tree only (add --topology fattree)")
    d = FabricSpec()
    spec = FabricSpec(d.spines if shape["spines"] is None else shape["spines"],
                      d.leaves if shape["leaves"] is None else shape["leaves"],
                      d.hosts_per_leaf if shape["hosts_per_leaf"] is None else shape["hosts_per_leaf"],
                      args.host_rate, args.fabric_rate)
    args.spines, args.leaves, args.hosts_per_leaf, args.k = spec.spines, spec.leaves, spec.hosts_per_leaf, None
    return spec


def check_out_dir(out: str) -> None:
    """The results folder must be one we can create or write, and must not hold another run: its summary would
    be taken for this run's by every reader if this one were killed before writing its own."""
    from experiment.results import RunFolder
    if os.path.exists(out) and not os.path.isdir(out):
        raise BadInput(f"--out {out}: exists and is not a directory")
    if RunFolder(out).is_run():
        raise BadInput(f"--out {out}: already holds a run (summary.json or config.json); choose another folder")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"--out {out}: cannot create or write it ({parent} is not a writable directory)")


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


# ------------------------------------------------------------------------------------------------ the run
def outcome(failures: List[str], faithful: Optional[bool]) -> Tuple[bool, Optional[str], int]:
    """(ok, error, exit code) of a run that went to its end: any failure fails it; a run that completed but
    whose emulator did not keep up (``faithful`` false) is ok, yet exits with EXIT_UNFAITHFUL, since its
    figures are not the scheduler's either."""
    if failures:
        return False, "; ".join(dict.fromkeys(failures)), EXIT_FAILED
    if faithful is False:
        return True, None, EXIT_UNFAITHFUL
    return True, None, EXIT_OK


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


def run_id_of(args, scenario_name: str) -> str:
    return args.run_id or "{}-{}-{}-s{}".format(time.strftime("%Y%m%d-%H%M%S"), args.scheduler, scenario_name,
                                                args.seed)


def run_fluid(args, resolved: dict) -> int:
    """The same experiment in the flow-level twin (twin/): no root, no fabric, the same results folder."""
    import twin
    run_id = run_id_of(args, resolved["scenario"].name)
    out = os.path.abspath(args.out or os.path.join(PROJECT_DIR, "results", run_id))
    if not args.quiet:
        LOG.info("run %s -> %s (fluid engine, %s model)", run_id, out, args.twin_model)
    try:
        return twin.run_fluid(resolved, scheduler=args.scheduler, seed=args.seed, out=out, run_id=run_id,
                              class_mode=args.class_mode, class_floor=args.class_floor, model=args.twin_model,
                              model_overrides=args.twin_set, hash_model=args.twin_hash,
                              ring_model=args.twin_ring_model,
                              flags={name.replace("_", "-"): value for name, value in sorted(vars(args).items())},
                              command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                              time_limit_s=args.time_limit, quiet=args.quiet, queue_ms=args.queue_ms)
    except (ValueError, OSError) as exc:
        raise BadInput(f"--twin-model: {exc}")


def main(argv=None) -> int:
    def on_signal(signum, frame):
        _signalled.append(signal.Signals(signum).name)
        raise Interrupted(signal.Signals(signum).name)

    _signalled.clear()

    # From the start, so that a signal at any moment ends the run the same way (never with a traceback); the
    # caller's handlers come back at the end (main() also runs inside other programs, e.g. the tests).
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        return _main(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                            format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
        try:
            resolved = validate(args)
            if args.engine == "fluid":
                return run_fluid(args, resolved)
            preflight(args.datapath, resolved["transport"].congestion_control)
        except BadInput as exc:
            sys.stderr.write(f"run.py: {exc}\n")
            return EXIT_BAD_INPUT
        removed = clean_stale()
        if removed:
            LOG.warning("removed the leftovers of an earlier run that was killed: %s", "; ".join(removed))
    except Interrupted as exc:
        sys.stderr.write(f"run.py: interrupted ({exc}) before the fabric was started\n")
        return EXIT_INTERRUPTED
    try:
        return run(args, resolved)
    except Interrupted as exc:  # between the checks and the start of the fabric: nothing to tear down
        sys.stderr.write(f"run.py: interrupted ({exc}) before the fabric was started\n")
        return EXIT_INTERRUPTED
