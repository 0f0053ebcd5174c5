"""The flow-level twin: the testbed's scenarios and schedulers in a fluid network model, without root or Mininet.

It runs the project's own scheduler objects (controller/schedulers) on the workers' own iteration program
(workloads/program.py) over a fluid model of the same fabric (twin/network.py, twin/engine.py), and writes a
results folder of the same shape as an emulation run: ``config.json`` and ``summary.json`` through
experiment/results.py, with ``config.engine = "fluid"``. Its parameters (ideal or calibrated, every artefact term
named) are in twin/model.py; docs/twin.md says what it models, how it was checked against the emulation, and
where it disagrees.

Running a plan (experiment/plan.py; cli/run.py's ``validate(args)`` makes one from the flags, ``prepare``
from a scenario file and a fabric; for fabrics above the emulation's 250 hosts, validate the spec with
``spec.validate(max_hosts=twin.MAX_HOSTS)``)::

    import twin
    plan = twin.prepare("smoke", spec, scheduler="crux", seed=1, quiet=True).named(out="/tmp/run")
    code = twin.run_fluid(plan)     # 0: ok, 1: failed (summary.json says why); a plan with faults is refused

``plan.twin`` (``TwinSettings``) names the model ("ideal" | "calibrated" | "physical" | ModelParams | a JSON
file), its overrides, the ECMP hash ("ovs" | "salted") and the ring model ("steps" | "pipelined" | "auto").

``simulate(layout, jobs, scheduler, ...)`` runs a simulation and returns the engine's ``RunResult`` without
writing anything (tests, benchmarks, the fit).
"""
from __future__ import annotations

import dataclasses
import os
import platform
import time
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from core.fabric import FabricLayout, FabricSpec
from core.model import JobSpec
from core.stats import percentile
from core.queues import DEFAULT_QUEUE_MS
from core.transport import DEFAULT_PROFILE, PROFILES, TransportProfile
from experiment.plan import RunPlan
from twin.engine import FluidSim, RunResult
from twin.model import IDEAL, ModelParams, calibrated, calibration_notes, parse_model_overrides, resolve_model
from twin.network import HASH_MODELS, Network

__all__ = ["MAX_HOSTS", "run_fluid", "simulate", "ring_model_for", "summarize", "prepare", "prepare_recorded",
           "ModelParams", "IDEAL", "calibrated"]

#: Hosts the twin accepts (host addresses continue past the emulation's 250 into the next octets).
MAX_HOSTS = 65000
ENGINE = "fluid"
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Up to this many GPUs ``ring_model="auto"`` simulates every ring step; above, whole rings (docs/twin.md).
AUTO_STEPS_MAX_GPUS = 128


def ring_model_for(jobs: Sequence[JobSpec], ring_model: str = "auto") -> str:
    """The ring model ``auto`` stands for with these jobs: steps up to AUTO_STEPS_MAX_GPUS GPUs, pipelined above.
    A job run alone for a bound takes its whole scenario's, so that the bound and the runs share one model."""
    if ring_model != "auto":
        return ring_model
    return "steps" if sum(j.workers for j in jobs) <= AUTO_STEPS_MAX_GPUS else "pipelined"


def simulate(layout: FabricLayout, jobs: Sequence[JobSpec], scheduler: str = "ecmp",
             scheduler_params: Optional[Mapping[str, Any]] = None,
             model: Union[str, ModelParams, Mapping[str, Any], None] = "ideal", class_mode: str = "strict",
             class_floor: float = 0.0, hash_seed: int = 1, time_limit_s: float = 3600.0,
             ring_model: str = "auto", hash_model: str = "ovs", queue_ms: float = DEFAULT_QUEUE_MS,
             lossless: bool = False, seed: int = 1, trace_ops: bool = False, window_packets: Optional[int] = None,
             rto_min_s: Optional[float] = None) -> RunResult:
    """Run the jobs on the layout under the named scheduler and return what happened. ``ring_model``:
    ``steps`` (every ring step a flow), ``pipelined`` (a bucket's ring one flow) or ``auto`` (steps up to
    AUTO_STEPS_MAX_GPUS GPUs, pipelined above). ``hash_model``: how hashed (ECMP) paths are chosen,
    ``ovs`` (Open vSwitch's own hash, as in the emulation) or ``salted`` (by ``hash_seed``; twin/network.py).
    ``queue_ms`` sizes the class FIFOs as the testbed does; ``lossless`` (the lossless transport profile) sizes
    them so that none overflows; ``window_packets`` (its receive window clamp) bounds what one flow has queued and
    ``rto_min_s`` (its minimum retransmission timer) is a floor under the model's ``rto_s``. ``seed`` draws the
    model's noise (``ModelParams.step_latency_cv``). ``trace_ops``: the result's ``op_trace`` holds every rank's
    launch and done time of every operation."""
    if hash_model not in HASH_MODELS:
        raise ValueError(f"hash model must be one of {', '.join(HASH_MODELS)} (got {hash_model!r})")
    ring_model = ring_model_for(jobs, ring_model)
    from controller.schedulers.registry import make_scheduler
    params = resolve_model(model)
    view = layout.view()
    policy = make_scheduler(scheduler, view, jobs, dict(scheduler_params or {}))
    net = Network(layout, view, goodput=params.goodput)
    sim = FluidSim(net, jobs, policy, params, class_mode=class_mode, class_floor=class_floor,
                   hash_seed=hash_seed, time_limit_s=time_limit_s, ring_model=ring_model, hash_model=hash_model,
                   queue_ms=queue_ms, lossless=lossless, seed=seed, trace_ops=trace_ops,
                   window_packets=window_packets, rto_min_s=rto_min_s)
    result = sim.run()
    result.scheduler = policy  # for its own statistics (changes, op_changes)
    return result


def replay_recorded(config: Mapping[str, Any], model: Union[str, ModelParams, Mapping[str, Any], None],
                    scheduler: Optional[str] = None, seed: Optional[int] = None, **options: Any):
    """Run the twin on a recorded run (summary.json's ``config``, either engine's): its jobs as placed, its
    scheduler (or ``scheduler``, then without the run's parameters), classes, FIFOs and seed (or ``seed``), under
    ``model``; ``options`` go to simulate(). Returns (jobs, RunResult)."""
    plan = prepare_recorded(config)
    seed = plan.seed if seed is None else seed
    params = plan.scheduler_params if scheduler is None else {}
    result = simulate(plan.layout, plan.jobs, scheduler or plan.scheduler, params, model, plan.class_mode,
                      plan.class_floor, seed, **transport_settings(plan.transport, plan.queue_ms), seed=seed,
                      **options)
    return plan.jobs, result


def transport_settings(transport: Optional[TransportProfile], queue_ms: float = DEFAULT_QUEUE_MS) -> Dict[str, Any]:
    """The FIFO and transport settings of simulate() (``queue_ms``, ``lossless``, ``window_packets``,
    ``rto_min_s``) of a transport profile."""
    transport = transport or PROFILES[DEFAULT_PROFILE]
    return {"queue_ms": float(queue_ms or DEFAULT_QUEUE_MS), "lossless": transport.lossless,
            "window_packets": transport.window_packets,
            "rto_min_s": transport.rto_min_ms / 1000.0 if transport.rto_min_ms else None}


def fifo_settings(config: Mapping[str, Any]) -> Dict[str, Any]:
    """``transport_settings`` as a run's config (either engine's) records them."""
    return transport_settings(TransportProfile.from_dict(config.get("transport")), config.get("queue_ms"))


def prepare(scenario: str, spec: FabricSpec, iterations: Optional[int] = None, **settings: Any) -> RunPlan:
    """A plan for a scenario file on a fabric, as the run command would make it (without its flags): for code
    that runs the twin without the command (crossval, fit, benchmarks, tests). ``settings`` are RunPlan fields
    (scheduler, seed, twin, ...)."""
    from workloads.scenario import load_scenario
    spec.validate(max_hosts=MAX_HOSTS)
    layout = FabricLayout.from_spec(spec)
    resolved = load_scenario(scenario).resolve(layout.host_tuples(), spec.host_rate_mbps)
    jobs = resolved.jobs
    if iterations is not None:
        jobs = [dataclasses.replace(j, iterations=iterations) for j in jobs]
    return RunPlan(spec=spec, layout=layout, scenario=resolved, jobs=jobs,
                   scenario_path=os.path.abspath(str(scenario)), iterations_override=iterations, **settings)


def prepare_recorded(config: Mapping[str, Any]) -> RunPlan:
    """The plan of a recorded run, from its config (summary.json's ``config``, either engine's): the jobs exactly
    as that run placed and scaled them, whatever the scenario code does today."""
    from workloads.scenario import ResolvedScenario
    fabric = {k: v for k, v in config["fabric"].items() if k in FabricSpec.__dataclass_fields__}
    spec = FabricSpec(**fabric)
    scenario = ResolvedScenario.from_dict(config["scenario"])
    jobs = scenario.jobs
    if config.get("iterations_override"):
        jobs = [dataclasses.replace(j, iterations=int(config["iterations_override"])) for j in jobs]
    return RunPlan(spec=spec, layout=FabricLayout.from_spec(spec), scenario=scenario, jobs=jobs,
                   scheduler=config.get("scheduler", "ecmp"),
                   scheduler_params=dict(config.get("scheduler_params") or {}),
                   scenario_path=config.get("scenario_file"), transport=TransportProfile.from_dict(
                       config.get("transport")), seed=int(config.get("seed") or 1),
                   class_floor=float(config.get("class_floor", 0.01)), class_mode=config.get("class_mode", "strict"),
                   queue_ms=float(config.get("queue_ms") or DEFAULT_QUEUE_MS),
                   iterations_override=config.get("iterations_override"), run_id=config.get("run_id", ""))


def _mean(values: Sequence[float]) -> Optional[float]:
    return float(np.mean(values)) if len(values) else None


def summarize(jobs: Sequence[JobSpec], result: RunResult) -> Dict[str, Any]:
    """Per-job and cluster figures with the workers' definitions (workloads/truth.py): a rank's wall is from the
    start of its first iteration to the end of its last, utilisation is busy / wall averaged over ranks, an
    iteration's time is the slowest rank's, the cluster weights jobs by GPUs."""
    out_jobs: List[Dict[str, Any]] = []
    weighted, gpus = 0.0, 0
    for job in jobs:
        ranks = [result.ranks[(job.index, r)] for r in range(job.workers)]
        per_rank, utils = [], []
        for st in ranks:
            if not st.iterations:
                per_rank.append({"rank": st.rank, "iterations": 0})
                continue
            start, end = st.iterations[0][0], st.iterations[-1][1]
            wall = end - start
            util = st.busy_s / wall if wall > 0 else float("nan")
            utils.append(util)
            per_rank.append({"rank": st.rank, "iterations": len(st.iterations), "start": start, "end": end,
                             "wall_s": wall, "busy_s": st.busy_s, "wait_s": st.wait_s, "gpu_utilization": util})
        complete = min(len(st.iterations) for st in ranks)
        it_times = [max(st.iterations[k][1] - st.iterations[k][0] for st in ranks) for k in range(complete)]
        ops = [t for _it, _b, t in result.op_times.get(job.index, [])]
        by_bucket: Dict[int, List[float]] = {}
        for _it, b, t in result.op_times.get(job.index, []):
            by_bucket.setdefault(b, []).append(t)
        util = _mean(utils)
        entry = {
            "name": job.name, "model": job.model.name, "workers": job.workers, "iterations": complete,
            "hosts": list(job.hosts), "job_index": job.index, "semantics": job.semantics,
            "complete": complete == job.iterations,
            "iteration_times_s": it_times,
            "iteration_time_mean_s": _mean(it_times), "iteration_time_p50_s": percentile(it_times, 50),
            "iteration_time_p99_s": percentile(it_times, 99),
            "wall_s": _mean([p["wall_s"] for p in per_rank if "wall_s" in p]),
            "busy_s": _mean([p["busy_s"] for p in per_rank if "busy_s" in p]),
            "wait_s": _mean([p["wait_s"] for p in per_rank if "wait_s" in p]),
            "gpu_utilization": util,
            "op_time_mean_s": _mean(ops), "op_time_p50_s": percentile(ops, 50), "op_time_p99_s": percentile(ops, 99),
            "op_time_by_bucket_s": {str(b): float(np.mean(v)) for b, v in sorted(by_bucket.items())},
            # Starvation timeouts are counted, overflow timeouts expected (twin/model.py): not always whole.
            "timeouts": round(float(result.timeouts.get(job.index, 0)), 1),
            # How much of the figure rests on the starvation rule, a threshold (docs/twin-log.md, Against the suite).
            "starvation_timeouts": round(float(result.starvation_timeouts.get(job.index, 0)), 1),
            "starved_flow_s": round(float(result.starved_flow_s.get(job.index, 0.0)), 3),
            "per_rank": per_rank,
        }
        if complete < job.iterations:
            entry["error"] = f"{complete} of {job.iterations} iterations completed"
        out_jobs.append(entry)
        if util is not None and not np.isnan(util):
            weighted += util * job.workers
            gpus += job.workers
    cluster = {"gpu_utilization": weighted / gpus if gpus else None, "gpus": sum(j.workers for j in jobs)}
    return {"jobs": out_jobs, "cluster": cluster}


def starvation_notes(jobs: Sequence[Mapping[str, Any]]) -> List[str]:
    """What a run's results should say about its starved jobs: a job whose flows the starvation rule timed out has
    a figure that rests on a threshold, and such jobs were the twin's largest misses against the emulation
    (docs/twin-log.md, Against the suite)."""
    starved = [j for j in jobs if (j.get("starvation_timeouts") or 0) > 0]
    if not starved:
        return []
    named = ", ".join(f"{j['name']} ({j['starvation_timeouts']:g} timeouts, {j['starved_flow_s']:.1f} s starved, "
                      f"summed over its flows)" for j in starved)
    return [f"the starvation rule (a flow under starve_share of its host link for rto_s times out) decides part of "
            f"the figures of {named}; the twin's figures for starved jobs are its least reliable: check them in "
            f"the emulation (docs/twin-log.md, Against the suite)"]


def run_fluid(plan: RunPlan) -> int:
    """Run one plan in the twin and write its results folder (``plan.out``; see the module docstring). Returns 0
    when the run completed, 1 when it failed (the summary's ``error`` says why)."""
    from experiment.results import JobSummary, RunFolder, RunSummary, code_version

    out = os.path.abspath(plan.out)
    folder = RunFolder(out)
    run_id = plan.run_id or os.path.basename(out)
    settings, spec, jobs, params = plan.twin, plan.spec, list(plan.jobs), dict(plan.scheduler_params)
    model = settings.model
    model_params = resolve_model(model)
    if settings.overrides:
        model_params = parse_model_overrides(settings.overrides, model_params)
    hash_seed = plan.seed if settings.hash_seed is None else settings.hash_seed
    config = dataclasses.replace(plan, run_id=run_id).config(ENGINE, twin={
        "model": model if isinstance(model, str) else "custom", "overrides": list(settings.overrides),
        "params": model_params.to_dict(), "hash_model": settings.hash_model,
        "hash_seed": hash_seed if settings.hash_model == "salted" else None})
    folder.write_config(config)
    summary = RunSummary(run_id=run_id, config=config, seed=plan.seed,
                         versions={"python": platform.python_version(), "numpy": np.__version__,
                                   "engine": ENGINE, **code_version(PROJECT_DIR)},
                         extra={"started_at": time.time()})
    code = 1
    try:
        if plan.faults:
            raise ValueError("the fluid engine does not model faults (links failing or coming back)")
        fifo = transport_settings(plan.transport, plan.queue_ms)
        result = simulate(plan.layout, jobs, plan.scheduler, params, model_params, plan.class_mode,
                          plan.class_floor, hash_seed, plan.time_limit_s, settings.ring_model, settings.hash_model,
                          **fifo, seed=plan.seed)
        figures = summarize(jobs, result)
        summary.jobs = [JobSummary.from_dict(j) for j in figures["jobs"]]
        summary.cluster = figures["cluster"]
        policy = result.scheduler
        summary.controller = {
            "ok": True, "scheduler": plan.scheduler, "scheduler_params": params,
            "events_received": result.events, "events_sent": result.events_sent,
            "event_latency_ms_median": model_params.event_latency_s * 1e3,
            "event_latency_ms_p99": model_params.event_latency_s * 1e3,
            "flowmods": result.flow_changes, "decide_calls": result.decide_calls,
            "reaction_latency_ms_median": model_params.reaction_latency_s * 1e3,
            "reaction_latency_ms_p99": model_params.reaction_latency_s * 1e3,
            "class_changes": getattr(policy, "op_changes", None),
            "live_class_changes": result.live_class_changes,
            "steals": getattr(policy, "steals", None),
            "lowered": getattr(policy, "lowered", None),
            "reorders": getattr(policy, "reorders", None),
        }
        notes = calibration_notes(model_params, spec.host_rate_mbps, spec.fabric_rate_mbps, fifo["lossless"])
        notes += starvation_notes(figures["jobs"])
        summary.extra["twin"] = {"ring_model": result.ring_model, "sim_time_s": result.sim_time_s,
                                 "notes": notes,
                                 "wall_s": result.wall_s,
                                 "recomputes": result.recomputes,
                                 "timeouts": round(float(sum(result.timeouts.values())), 1),
                                 # Starvations of rto_s or more, by the flows their class FIFO held at the onset.
                                 "starvations_by_fifo_flows": {str(k): n for k, n in result.starvations.items()}}
        summary.extra["workload_wall_s"] = result.sim_time_s
        summary.extra["timed_out"] = bool(result.error and "time limit" in result.error)
        summary.ok = result.completed
        summary.error = result.error
        code = 0 if result.completed else 1
    except Exception as exc:  # a bug or bad input: one line in the summary, the traceback next to it
        with open(folder.file(RunFolder.ERROR_LOG), "w") as f:
            traceback.print_exc(file=f)
        summary.ok = False
        summary.error = f"{type(exc).__name__}: {exc}"
    summary.extra["finished_at"] = time.time()
    folder.write_summary(summary)
    if not plan.quiet:
        _print(summary, out)
    return code


def _print(summary, out: str) -> None:
    print(f"run {summary.run_id} (fluid): {'OK' if summary.ok else 'FAILED'}"
          + (f" ({summary.error})" if summary.error else ""))
    for j in summary.jobs:
        mean, util = j.iteration_time_mean_s, j.gpu_utilization
        print(f"  {j.name:<12} {j.model:<12} {j.workers:>7} {j.iterations:>5} "
              f"{'-' if mean is None else f'{mean:.3f}':>11} {'-' if util is None else f'{util:.3f}':>8}")
    cu = summary.cluster.get("gpu_utilization")
    if cu is not None:
        print(f"  cluster GPU utilisation: {cu:.3f}")
    for note in (summary.extra.get("twin") or {}).get("notes") or []:
        print(f"  note: {note}")
    print(f"  results: {out}/summary.json")
