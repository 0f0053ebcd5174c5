"""``flux-testbed run`` (and ``testbed/run.py``): check one experiment's plan, then run it in one engine.

    sudo python testbed/run.py --scheduler flux [--scenario FILE] [--out DIR] [topology flags]

Everything that can be checked is checked before anything starts (flags, scenario, scheduler, fabric, faults);
then the plan goes to the emulation (testbed/emulation.py: preflight checks, stale-state cleanup, fabric and
controller, checks, the workload, the summary) or to the twin (``--engine fluid``, twin/).

Writes results/<run-id>/ (see results/README.md). Exit codes: 0 success; 1 failed run (workers failed, a
controller died or lost its switches, time limit, or an error); 2 bad input or environment (nothing is started
then); 3 the run completed but the emulation was not faithful (fidelity warnings: do not publish its figures);
130 interrupted.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys

from core import queues
from core.config import DEFAULT_POLL_INTERVAL_S
from core.faults import check_targets, parse_faults
from core.fabric import DEFAULT_FATTREE_K, TOPOLOGIES, FabricLayout, FabricSpec
from core.transport import CONGESTION_CONTROLS, DEFAULT_PROFILE, PROFILES, profile
from experiment.exits import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNFAITHFUL,  # noqa: F401
                              BadInput, Interrupted, clear_signals, on_signal, outcome)
from experiment.plan import EmulationSettings, RunPlan, TwinSettings
from testbed import emulation, qos

LOG = logging.getLogger("flux.run")

# One path component that is not "." or "..": a run id names a folder under results/.
SAFE_RUN_ID = re.compile(r"(?!\.\.?$)[A-Za-z0-9._+-]{1,128}")


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
                   help="scheduling policy: ecmp, bytescheduler, crux, flux or flux-v1 (docs/schedulers.md), a name "
                        "an installed package registers, or your own as package.module:ClassName, a subclass of "
                        "controller.schedulers.base.Scheduler on the Python path (docs/writing-a-scheduler.md)")
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
                   help="fabric family: leafspine (--spines, --leaves, --hosts-per-leaf), a 3-tier k-ary fattree "
                        "(--k), or racks and pods read from a file (--topology-file, --spines, "
                        "--aggregation-per-pod; the fluid engine only)")
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
    t.add_argument("--topology-file", default=argparse.SUPPRESS, metavar="CSV",
                   help="file: one row per host naming its rack, pod and core group (workloads/topologies/README.md; "
                        "Crux's production topology is workloads/topologies/alibaba-lingjun-2023.csv)")
    t.add_argument("--aggregation-per-pod", type=int, default=argparse.SUPPRESS, metavar="A",
                   help="file: aggregation switches per pod, each rack linked to all of them and each of them to "
                        "--spines / A cores (default 0: two tiers, every rack linked to every one of --spines)")
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
    c.add_argument("--controller-framework", choices=["auto", "ryu", "os-ken"], default="auto",
                   help="what the controller apps run on: Ryu 4.34 or os-ken, its maintained fork (the same apps; "
                        "auto: Ryu where installed, else os-ken; controller/framework.py)")
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
def validate(args) -> RunPlan:
    """Check everything that can be checked before anything starts; the run's plan."""
    from controller.schedulers.registry import module_root, parse_params, scheduler_class
    try:
        scheduler_class(args.scheduler)
    except ValueError as exc:
        raise BadInput(str(exc))
    root = module_root(args.scheduler)
    if root:
        # The controller runs in its own process: it must find the user's scheduler where this one did.
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    try:
        params = parse_params(args.param)
    except ValueError as exc:
        raise BadInput(f"--param: {exc}")
    try:
        spec = fabric_spec(args)
        if spec.topology == "file" and args.engine != "fluid":
            raise ValueError("--topology file: the fluid engine only (add --engine fluid)")
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
        except (ValueError, OSError) as exc:
            raise BadInput(f"--twin-model/--twin-set: {exc}")
    if args.run_id is not None and not SAFE_RUN_ID.fullmatch(args.run_id):
        raise BadInput(f"--run-id {args.run_id!r}: use one folder name of letters, digits and . _ + - "
                       "(it names results/<run-id>/)")
    if args.out is not None:
        check_out_dir(args.out)
    from controller.framework import resolve
    try:
        framework = resolve(args.controller_framework)
    except ValueError as exc:
        raise BadInput(f"--controller-framework: {exc}")
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
    plan = RunPlan(
        spec=spec, layout=layout, scenario=resolved, jobs=jobs, scheduler=args.scheduler, scheduler_params=params,
        scenario_path=os.path.abspath(path), faults=faults, transport=transport, seed=args.seed,
        class_floor=args.class_floor, class_mode=args.class_mode, queue_ms=args.queue_ms,
        time_limit_s=args.time_limit, iterations_override=args.iterations,
        command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        # Every flag by name (the fabric's shape as used), so that a sweep can read back any axis.
        flags={name.replace("_", "-"): value for name, value in sorted(vars(args).items())}, quiet=args.quiet,
        emulation=EmulationSettings(poll_interval_s=args.poll_interval, controller_recovery=args.controller_recovery,
                                    controller_framework=framework,
                                    datapath=args.datapath, skip_checks=args.skip_checks,
                                    no_workload=args.no_workload),
        twin=TwinSettings(model=args.twin_model, overrides=tuple(args.twin_set), hash_model=args.twin_hash,
                          ring_model=args.twin_ring_model))
    return plan.named(args.run_id, args.out)


def fabric_spec(args) -> FabricSpec:
    """The fabric of the flags; records the shape actually used back into ``args`` (and so into config.flags).
    ValueError when a shape flag of the other family is given."""
    shape = {name: getattr(args, name, None) for name in ("spines", "leaves", "hosts_per_leaf", "k", "topology_file",
                                                          "aggregation_per_pod")}
    if args.topology != "file":
        given = [f"--{n.replace('_', '-')}" for n in ("topology_file", "aggregation_per_pod") if shape[n] is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: file fabrics only (add --topology file)")
    else:
        given = [f"--{n.replace('_', '-')}" for n in ("leaves", "hosts_per_leaf", "k") if shape[n] is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: a file fabric's racks come from --topology-file")
        if shape["topology_file"] is None:
            raise ValueError("--topology file needs --topology-file CSV")
        spec = FabricSpec.from_file(shape["topology_file"], FabricSpec().spines if shape["spines"] is None
                                    else shape["spines"], shape["aggregation_per_pod"] or 0, args.host_rate,
                                    args.fabric_rate)
        args.spines, args.leaves, args.hosts_per_leaf, args.k = spec.spines, spec.leaves, spec.hosts_per_leaf, None
        args.topology_file, args.aggregation_per_pod = spec.topology_file, spec.aggregation_per_pod
        return spec
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


def run_fluid(plan: RunPlan) -> int:
    """The same experiment in the flow-level twin (twin/): no root, no fabric, the same results folder."""
    import twin
    if not plan.quiet:
        LOG.info("run %s -> %s (fluid engine, %s model)", plan.run_id, plan.out, plan.twin.model)
    return twin.run_fluid(plan)


def main(argv=None) -> int:
    clear_signals()

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
            plan = validate(args)
            if args.engine == "fluid":
                return run_fluid(plan)
            emulation.preflight(plan.emulation.datapath, plan.transport.congestion_control)
        except BadInput as exc:
            sys.stderr.write(f"run.py: {exc}\n")
            return EXIT_BAD_INPUT
        removed = emulation.clean_stale()
        if removed:
            LOG.warning("removed the leftovers of an earlier run that was killed: %s", "; ".join(removed))
    except Interrupted as exc:
        sys.stderr.write(f"run.py: interrupted ({exc}) before the fabric was started\n")
        return EXIT_INTERRUPTED
    try:
        return emulation.run(plan)
    except Interrupted as exc:  # between the checks and the start of the fabric: nothing to tear down
        sys.stderr.write(f"run.py: interrupted ({exc}) before the fabric was started\n")
        return EXIT_INTERRUPTED
