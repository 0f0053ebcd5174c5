#!/usr/bin/env python3
"""The scale map: the shipped schedulers in the twin over fabrics, tenant counts and oversubscription, each point
against its solo and capacity-aware bounds.

Question: Where, at scale, is there room above Crux, and does Flux take it? (docs/scale-predictions.md and
docs/scale-predictions-paths.md, each written before its runs, say what was expected.)
Answer: see docs/scale.md, generated from the committed map by ``report``.
Cited in: docs/scale.md.

    python research/scale_map.py run --gpus 256 --tenants 8,16,32 --oversubscription 1,2,4 --seeds 1,2 \\
        --out results/scale/map                   # --fabric lingjun | lingjun-2tier, --churn S: other points
    sudo python research/scale_map.py confirm --schedulers ecmp,bytescheduler,crux,flux \\
        --out results/scale/confirm-16            # points scaled to 16 hosts, in the emulation and the twin
    python research/scale_map.py report results/scale/map [--confirm DIR] [--suite DIR --suite-before DIR] \\
        [--before DIR] [--md docs/scale.md]

The commands behind the committed map: results/scale/map/README.md.

A point is a leaf-spine of GPUS hosts (16 per leaf up to 256 GPUs, 32 above), its spines set for the
oversubscription (hosts per leaf over spines, host and fabric links at --rate), and TENANTS jobs of equal ring
size cycling through ResNet-50, VGG-16, BERT-large and GPT-2 1.5B, with iteration counts that keep them running
for a similar time (as workloads/scenarios/scale-1024.yaml), placed by --placement with the run's seed. Every
scheduler runs it in the twin (calibrated model), and ``crux-hop`` (Crux with a path per ring hop, the ablation of
Flux's paths); each job also runs alone under ECMP, ByteScheduler's order and on placed paths (``SOLO``; physical
model, as cli/bounds.py does) for the solo bound, and analysis/bounds.py gives the capacity-aware bound.
``run`` appends one row per (point, seed, scheduler) to OUT/map.csv and skips rows already there; ``report``
prints the Markdown of docs/scale.md.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import time
from typing import Dict, List, Optional, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)

import yaml

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("resnet50", "vgg16", "bert_large", "gpt2_xl")
ITERATIONS = {"resnet50": 8, "vgg16": 6, "bert_large": 5, "gpt2_xl": 2}
#: Map variants beyond the shipped schedulers' defaults: name -> (scheduler, parameters).
VARIANTS = {"crux-hop": ("crux", {"paths": "hop"}), "flux-reorder": ("flux", {"reorder_live": True}),
            "flux-contended": ("flux", {"order": "contended"}),
            "flux-in-place": ("flux", {"order": "contended-in-place"}),
            "flux-shared": ("flux", {"order": "shared-in-place"})}
#: A job's solo bound is its best alone among these: hashed paths (ECMP, ByteScheduler's order) collide even
#: within one ring, so a lone run on placed paths (a path per hop, least-loaded first) is among them.
SOLO = (("ecmp", {}), ("bytescheduler", {}), ("crux", {"paths": "hop"}))
SCHEDULERS = ("ecmp", "bytescheduler", "crux", "crux-hop", "flux")
COLUMNS = ["fabric", "churn", "gpus", "tenants", "oversubscription", "placement", "seed", "scheduler", "u", "timeouts",
           "u_solo_bound", "u_capacity_bound", "capacity_method", "sim_s", "wall_s", "git_commit"]


#: Fabrics from Crux's production topology (workloads/topologies/README.md): (spines or cores, aggregation
#: switches per pod). The file gives racks and pods only: 4 uplinks per rack (2:1 for a rack of 8), and cores for
#: about 2:1 again above the largest pod (48 racks x 4 links into 4 aggregation switches, 24 cores each);
#: ``lingjun-2tier`` is the same racks under 4 spines, without the pod tier: the two-layer Clos of the same hosts.
LINGJUN = os.path.join(PROJECT_DIR, "workloads", "topologies", "alibaba-lingjun-2023.csv")
FABRICS = {"leafspine": None, "lingjun": (96, 4), "lingjun-2tier": (4, 0)}


def fabric(gpus: int, oversubscription: float, rate: float, family: str = "leafspine"):
    from core.fabric import FabricSpec
    if family != "leafspine":
        spines, aggregation = FABRICS[family]
        return FabricSpec.from_file(LINGJUN, spines, aggregation, rate, rate)
    per_leaf = 16 if gpus <= 256 else 32
    if gpus % per_leaf:
        raise ValueError(f"--gpus {gpus}: a multiple of {per_leaf}")
    spines = per_leaf / oversubscription
    if spines < 1 or spines != int(spines):
        raise ValueError(f"--oversubscription {oversubscription:g}: {per_leaf} hosts per leaf over a whole number "
                         "of spines")
    return FabricSpec(int(spines), gpus // per_leaf, per_leaf, rate, rate)


def scenario(gpus: int, tenants: int, placement: str, seed: int, churn: float = 0.0) -> dict:
    size = gpus // tenants
    if size < 2 or size * tenants != gpus:
        raise ValueError(f"{tenants} tenants on {gpus} GPUs: rings of 2 or more workers that share them exactly")
    jobs = [{"name": f"t{i:03d}-{MODELS[i % len(MODELS)]}", "model": MODELS[i % len(MODELS)], "workers": size,
             "iterations": ITERATIONS[MODELS[i % len(MODELS)]]} for i in range(tenants)]
    data = {"name": f"map-{gpus}-{tenants}", "real_link_gbps": 100, "time_scale": "auto", "max_buckets": 4,
            "placement": {"policy": placement, "seed": seed}, "jobs": jobs}
    if churn:
        data["arrivals"] = {"process": "poisson", "mean_interarrival_s": churn, "seed": seed}
    return data


def twin_settings(plan, seed: int, ring_model: str = "auto") -> dict:
    """twin.simulate's keywords for a prepared plan and seed (its classes, FIFOs, hash and noise seeds)."""
    import twin
    return dict(class_mode=plan.class_mode, class_floor=plan.class_floor, hash_seed=seed, time_limit_s=3600.0,
                ring_model=ring_model, **twin.transport_settings(plan.transport, plan.queue_ms), seed=seed)


def measure_point(gpus, tenants, oversubscription, placement, seed, schedulers, rate, folder,
                  family: str = "leafspine", churn: float = 0.0) -> List[dict]:
    import twin
    from analysis.bounds import capacity_bound
    from experiment.results import code_label, code_version

    spec = fabric(gpus, oversubscription, rate, family)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"scenario-{family}-{gpus}-{tenants}-{oversubscription:g}-{placement}-c{churn:g}"
                                f"-s{seed}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(scenario(gpus, tenants, placement, seed, churn), f, sort_keys=False)
    plan = twin.prepare(path, spec, seed=seed)
    # One ring model for the bound's lone runs and the scenario's (auto picks by the GPUs simulated together).
    common = twin_settings(plan, seed, twin.ring_model_for(plan.jobs))
    solo = {}
    for job in plan.jobs:
        alone = dataclasses.replace(job, start_offset_s=0.0)
        utils = []
        for s, params in SOLO:
            figures = twin.summarize([alone], twin.simulate(plan.layout, [alone], s, params, "physical", **common))
            utils.append(figures["cluster"]["gpu_utilization"])
        solo[job.name] = max(utils)
    gpus_total = sum(j.workers for j in plan.jobs)
    u_solo = sum(solo[j.name] * j.workers for j in plan.jobs) / gpus_total
    # The capacity-aware bound has every job from the start; with arrivals the jobs overlap less than it assumes,
    # so it would not bound them: the solo bound stands in for it.
    capacity = (capacity_bound(plan.layout, plan.jobs, solo) if not churn
                else {"cluster_u_bound": u_solo, "method": "solo (arrivals)"})
    label = code_label(code_version(PROJECT_DIR))
    rows = []
    for s in schedulers:
        wall = time.perf_counter()
        scheduler, params = variant(s, churn)
        result = twin.simulate(plan.layout, plan.jobs, scheduler, params, "calibrated", **common)
        figures = twin.summarize(plan.jobs, result)
        rows.append({"fabric": family, "churn": churn, "gpus": gpus, "tenants": tenants,
                     "oversubscription": oversubscription,
                     "placement": placement,
                     "seed": seed, "scheduler": s,
                     "u": figures["cluster"]["gpu_utilization"] if result.completed else None,
                     "timeouts": round(float(sum(result.timeouts.values())), 1), "u_solo_bound": u_solo,
                     "u_capacity_bound": capacity["cluster_u_bound"], "capacity_method": capacity["method"],
                     "sim_s": result.sim_time_s, "wall_s": time.perf_counter() - wall, "git_commit": label})
        sys.stderr.write(f"{family}, churn {churn:g}, {gpus} GPUs, {tenants} tenants, {oversubscription:g}:1, "
                         f"{placement}, "
                         f"seed {seed}, {s}: "
                         f"{rows[-1]['u']}\n")
    return rows


CONFIRM_COLUMNS = ["hosts", "spines", "tenants", "seed", "scheduler", "engine", "u", "faithful", "timeouts",
                   "ovs_cpu_mean", "emulator_wait_frames", "git_commit", "churn"]


def variant(name: str, churn: float = 0.0):
    """(scheduler, parameters) of a map or confirmation variant; under churn Crux and Flux run online."""
    scheduler, params = VARIANTS.get(name, (name, {}))
    if churn and scheduler in ("crux", "flux"):
        params = dict(params, online=True)
    return scheduler, params


def confirm(args) -> int:
    """Emulation confirmations: the map's setting scaled to what the emulation holds (LEAVES x HOSTS_PER_LEAF
    hosts, a ring per tenant, random placement seeded by the run's seed), each scheduler in the emulation and in
    the twin (calibrated model), one row per run in OUT/confirm.csv; rows already there are skipped."""
    import json
    import subprocess
    import twin
    from core.fabric import FabricSpec
    from experiment.results import code_label, code_version
    if os.geteuid() != 0:
        raise ValueError("confirm runs emulations: run it as root")
    os.makedirs(args.out, exist_ok=True)
    table = os.path.join(args.out, "confirm.csv")
    done = {(r["spines"], r["seed"], r["scheduler"], r["engine"], float(r.get("churn") or 0.0))
            for r in read_rows(table)}
    hosts = args.leaves * args.hosts_per_leaf
    label = code_label(code_version(PROJECT_DIR))
    for spines in args.spines:
        for seed in args.seeds:
            path = os.path.join(args.out, "scenarios", f"scenario-{hosts}-{args.tenants}-s{seed}.yaml")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump(scenario(hosts, args.tenants, "random", seed, args.churn), f, sort_keys=False)
            flags = ["--host-rate", f"{args.rate:g}", "--fabric-rate", f"{args.rate:g}", "--spines", str(spines),
                     "--leaves", str(args.leaves), "--hosts-per-leaf", str(args.hosts_per_leaf), "--seed", str(seed)]
            for s in args.schedulers.split(","):
                base = {"hosts": hosts, "spines": spines, "tenants": args.tenants, "seed": seed, "scheduler": s,
                        "git_commit": label, "churn": args.churn}
                scheduler, params = variant(s, args.churn)
                rows = []
                if (str(spines), str(seed), s, "emulation", args.churn) not in done:
                    out = os.path.join(args.runs, f"{hosts}h-{spines}sp-c{args.churn:g}-s{seed}-{s}")
                    cmd = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py"), "--scheduler", scheduler,
                           "--scenario", path, "--out", out, "-q", *flags]
                    for key, value in params.items():
                        cmd += ["--param", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
                    rc = subprocess.run(cmd).returncode
                    summary = {"cluster": {}}
                    if os.path.exists(os.path.join(out, "summary.json")):
                        with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
                            summary = json.load(f)
                    fid = summary.get("fidelity", {})
                    rows.append(dict(base, engine="emulation", u=summary["cluster"].get("gpu_utilization"),
                                     faithful=fid.get("faithful"), timeouts=(fid.get("tcp") or {}).get("timeouts"),
                                     ovs_cpu_mean=fid.get("ovs_vswitchd_cpu"),
                                     emulator_wait_frames=fid.get("emulator_wait_frames")))
                    sys.stderr.write(f"emulation {hosts} hosts, {spines} spines, seed {seed}, {s}: "
                                     f"{rows[-1]['u']} (exit {rc}, faithful {rows[-1]['faithful']})\n")
                if (str(spines), str(seed), s, "fluid", args.churn) not in done:
                    spec = FabricSpec(spines, args.leaves, args.hosts_per_leaf, args.rate, args.rate)
                    plan = twin.prepare(path, spec, seed=seed)
                    result = twin.simulate(plan.layout, plan.jobs, scheduler, params, "calibrated",
                                           **twin_settings(plan, seed))
                    rows.append(dict(base, engine="fluid",
                                     u=twin.summarize(plan.jobs, result)["cluster"]["gpu_utilization"],
                                     timeouts=round(float(sum(result.timeouts.values())), 1)))
                new = not os.path.exists(table)
                columns = CONFIRM_COLUMNS if new else list(read_rows(table)[0].keys())  # a table's own header
                with open(table, "a", newline="", encoding="utf-8") as f:
                    w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
                    if new:
                        w.writeheader()
                    w.writerows(rows)
    return 0


def orders(args) -> int:
    """Print a point's job order (highest first, by model) under Crux's priorities, ``order=contended`` and
    ``order=contended-in-place``, and how many jobs the fluid program leaves unpriced (no binding link on their
    rings: the contended order ranks them first, the in-place one leaves them where Crux has them)."""
    import tempfile
    import twin
    from controller.schedulers.crux import contended_costs, contended_in_place, contended_intensities, job_intensities
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "scenario.yaml")
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(scenario(args.gpus, args.tenants, args.placement, args.seed), f, sort_keys=False)
        spec = fabric(args.gpus, args.oversubscription, args.rate, args.fabric)
        plan = twin.prepare(path, spec, seed=args.seed)
    view = plan.layout.view()
    crux = job_intensities(view, plan.jobs, paths="hop", correction="pairwise")
    contended = contended_intensities(view, plan.jobs, crux)
    in_place = contended_in_place(view, plan.jobs, crux)
    model = {j.index: j.model.name for j in plan.jobs}
    first = sorted(crux, key=lambda i: (-crux[i].priority, i))
    second = sorted(contended, key=lambda i: (-contended[i].priority, i))
    third = sorted(in_place, key=lambda i: (-in_place[i].priority, i))
    costs = contended_costs(view, [j for j in plan.jobs if crux[j.index].comm_s > 0])
    unpriced = sum(1 for c in costs.values() if c <= 1e-12)
    print("crux:      " + " ".join(model[i] for i in first))
    print("contended: " + " ".join(model[i] for i in second))
    print("in place:  " + " ".join(model[i] for i in third))
    moved = [sum(a != b for a, b in zip(first, other)) for other in (second, third)]
    print(f"jobs the program leaves unpriced: {unpriced} of {len(second)}; jobs whose place differs from Crux's: "
          f"contended {moved[0]}, in place {moved[1]}")
    return 0


def read_rows(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def run(args) -> int:
    out = args.out
    os.makedirs(out, exist_ok=True)
    table = os.path.join(out, "map.csv")
    done = {(r["fabric"], r["churn"], r["gpus"], r["tenants"], r["oversubscription"], r["placement"], r["seed"],
             r["scheduler"])
            for r in read_rows(table)}
    schedulers = [x for x in args.schedulers.split(",") if x]
    from analysis.schedulers import scheduler_classes
    scheduler_classes([x for x in schedulers if x not in VARIANTS])  # ValueError (one line) for an unknown name
    points = []
    for tenants in args.tenants:
        if args.fabric == "leafspine":
            points += [(gpus, tenants, over) for gpus in args.gpus for over in args.oversubscription]
        else:  # the file's hosts, as many as rings of equal size fill; the racks set the oversubscription
            spec = fabric(0, 1.0, args.rate, args.fabric)
            points.append((spec.hosts // tenants * tenants, tenants, spec.oversubscription))
    for gpus, tenants, over in points:
        for seed in args.seeds:
            key = (args.fabric, str(args.churn), str(gpus), str(tenants), str(over), args.placement, str(seed))
            todo = [s for s in schedulers if key + (s,) not in done]
            if not todo:
                continue
            rows = measure_point(gpus, tenants, over, args.placement, seed, todo, args.rate,
                                 os.path.join(out, "scenarios"), args.fabric, args.churn)
            new = not os.path.exists(table)
            with open(table, "a", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=COLUMNS)
                if new:
                    w.writeheader()
                w.writerows(rows)
    return 0


def _mean(values: List[float]) -> Optional[float]:
    return statistics.mean(values) if values else None


def point_mean(points: Dict[tuple, Dict[str, List[dict]]], key: tuple, scheduler: str) -> Optional[float]:
    """A scheduler's mean utilisation over the seeds of one map point (None if it has no completed run)."""
    return _mean([float(r["u"]) for r in points[key].get(scheduler, []) if r["u"]])


def point_ratio(points: Dict[tuple, Dict[str, List[dict]]], key: tuple, a: str, b: str) -> Optional[float]:
    x, y = point_mean(points, key, a), point_mean(points, key, b)
    return x / y if x is not None and y else None


def map_points(folder: str) -> Dict[tuple, Dict[str, List[dict]]]:
    """(gpus, tenants, oversubscription, placement) -> scheduler -> rows of ``folder``/map.csv."""
    points: Dict[tuple, Dict[str, List[dict]]] = {}
    for r in read_rows(os.path.join(folder, "map.csv")):
        key = (int(r["gpus"]), int(r["tenants"]), float(r["oversubscription"]), r["placement"],
               r.get("fabric") or "leafspine", float(r.get("churn") or 0.0))
        points.setdefault(key, {}).setdefault(r["scheduler"], []).append(r)
    return points


def _cell(values: List[float]) -> str:
    if not values:
        return ""
    return f"{statistics.mean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.3f}" if a is not None and b else ""


def report(folder: str, confirm_folder: Optional[str] = None, suite: Optional[str] = None,
           suite_before: Optional[str] = None, before: Optional[str] = None,
           confirm_churn: Optional[str] = None, suite_contended: Optional[str] = None,
           suite_in_place: Optional[str] = None) -> str:
    """docs/scale.md's text from ``folder``/map.csv, the emulation's confirmations (``confirm_folder``/confirm.csv)
    and a suite rerun (``suite``/suite.csv against ``suite_before``/suite.csv); with ``suite_contended`` (a suite
    of ``flux-contended``) the contended order against Flux, on the map and on the suite; with
    ``suite_in_place`` likewise for the order kept in Crux's places."""
    points = map_points(folder)
    shown = ("ecmp", "bytescheduler", "crux", "crux-hop", "flux")
    command = f"python research/scale_map.py report {folder}"
    if confirm_folder:
        command += f" --confirm {confirm_folder}"
    if suite:
        command += f" --suite {suite} --suite-before {suite_before}"
    if before:
        command += f" --before {before}"
    if confirm_churn:
        command += f" --confirm-churn {confirm_churn}"
    if suite_contended:
        command += f" --suite-contended {suite_contended}"
    if suite_in_place:
        command += f" --suite-in-place {suite_in_place}"
    lines = [
        "# The scale map",
        "",
        f"Generated by `{command} --md docs/scale.md`;",
        "the runs: `python research/scale_map.py run ...` and `... confirm ...` (its docstring). Flow-level twin,",
        "calibrated model. What was expected before these runs: [scale-predictions.md](scale-predictions.md) and,",
        "for Flux's path per flow, [scale-predictions-paths.md](scale-predictions-paths.md); the bounds:",
        "[bounds.md](bounds.md) (the capacity-aware bound is the steady state's above 16 tenants; the solo bound here",
        "is each job's best alone under ECMP, ByteScheduler's order and on placed paths).",
        "",
        "Churn: the mean gap between tenants' arrivals (emulated s; 0: all at the start); under churn Crux and",
        "Flux run online (they hear of each arrival and departure) and the capacity column holds the solo bound",
        "(the capacity-aware bound assumes every job from the start).",
        "",
        "Each cell: cluster GPU utilisation, mean over seeds [min, max]. Ratios are of the means. \"Crux, path per",
        "flow\" is Crux with `paths=hop`, the ablation of Flux's paths; \"best\" is the best of ECMP, ByteScheduler",
        "and Crux.",
        "",
        "| fabric | churn | GPUs | tenants | oversub. | placement | seeds | ECMP | ByteScheduler | Crux "
        "| Crux, path per flow "
        "| Flux | solo bound | capacity bound | Crux / ECMP | Flux / Crux | Flux / best | Crux / capacity "
        "| Flux / capacity |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(points):
        by = points[key]
        u = {s: [float(r["u"]) for r in by.get(s, []) if r["u"]] for s in shown}
        means = {s: _mean(v) for s, v in u.items()}
        any_row = next(iter(by.values()))
        solo = _mean([float(r["u_solo_bound"]) for r in any_row])
        cap = _mean([float(r["u_capacity_bound"]) for r in any_row])
        best = max((means[s] for s in ("ecmp", "bytescheduler", "crux") if means[s] is not None), default=None)
        lines.append(f"| {key[4]} | {key[5]:g} | {key[0]} | {key[1]} | {key[2]:g}:1 | {key[3]} | {len(any_row)} | "
                     + " | ".join(_cell(u[s]) for s in shown)
                     + f" | {solo:.3f} | {cap:.3f} | {_ratio(means['crux'], means['ecmp'])} | "
                     f"{_ratio(means['flux'], means['crux'])} | {_ratio(means['flux'], best)} | "
                     f"{_ratio(means['crux'], cap)} | {_ratio(means['flux'], cap)} |")
    lines += ["", "Reading it: where the capacity-aware bound equals the solo bound, no cut is saturated on average "
              "over a run; what separates the schedulers from the bounds there is how the bytes are spread over "
              "the paths and when they are sent, which neither bound sees (they count bytes per cut). A path per "
              "job (Crux as published) leaves equal-cost paths idle while each job's ring queues on its own; a "
              "path per flow (Flux, and Crux with `paths=hop`) spreads every ring over them. What remains above "
              "Flux is time: jobs whose communication phases collide on shared uplinks, room that interleaving "
              "the jobs' phases (CASSINI's time shifts) could take and a priority order cannot. Part of every gap "
              "to the bounds is the twin itself: the bounds' lone runs use its physical model (no fitted delays, "
              "docs/bounds.md) and the runs its calibrated one, so jobs that share no link (the packed points) "
              "still sit below their solo bound."]
    churned = [k for k in sorted(points) if k[5]]
    gaps = [(k, point_ratio(points, k, "flux", "crux-hop")) for k in churned]
    gaps = [(k, v) for k, v in gaps if v is not None]
    if gaps:
        shown = ", ".join(f"{v:.3f} ({k[0]} GPUs, {k[1]} tenants, {k[2]:g}:1)" for k, v in gaps)
        lines += ["", "Under churn Flux and Crux with a path per flow differ in one thing: when an arrival or a "
                  "departure changes the order, Crux moves every live flow to its new class at once, Flux keeps "
                  "each live operation in the class it launched in (the emulation's lesson of flux-v1: a live class "
                  f"change strands a ring step in a starved class). In the twin, Flux / (Crux, path per flow): "
                  f"{shown}. " + ("Flux with `reorder_live=true` moves them too: the emulation's runs with tenants "
                                  "arriving compare the two below." if confirm_churn else
                                  "Whether moving live flows costs more than that in the emulation is not measured "
                                  "here.")]
    lines += target_lines(points, suite, suite_before)
    confirmations = confirmation_table(confirm_folder) if confirm_folder else []
    lines += confirmations
    lines += ["", "## The predictions, checked", "",
              "Each of [scale-predictions.md](scale-predictions.md), against the points above (a prediction about "
              "points the map does not hold is not measured).", ""]
    first = verdicts(points, map_points(before) if before else None)
    lines += [f"{n}. **{verdict}.** {text}" for n, (verdict, text) in enumerate(first, 1)]
    lines += ["", "And each of [scale-predictions-paths.md](scale-predictions-paths.md):", ""]
    second = path_verdicts(points, read_rows(os.path.join(confirm_folder, "confirm.csv")) if confirm_folder else [],
                           suite_changes(suite, suite_before) if suite else None,
                           map_points(before) if before else None)
    lines += [f"{n}. **{verdict}.** {text}" for n, (verdict, text) in enumerate(second, 8)]
    if confirm_churn:
        table, verdict = churn_confirmation(confirm_churn)
        lines[lines.index("## The predictions, checked") - 1:lines.index("## The predictions, checked") - 1] = table
        lines += ["", "And [scale-predictions-churn.md](scale-predictions-churn.md):", "",
                  f"15. **{verdict[0]}.** {verdict[1]}"]
    if any("flux-contended" in by for by in points.values()):
        table, judged = contended_section(points, suite_contended, suite)
        lines[lines.index("## The predictions, checked") - 1:lines.index("## The predictions, checked") - 1] = table
        lines += ["", "And [scale-predictions-contended.md](scale-predictions-contended.md):", ""]
        lines += [f"{n}. **{v}.** {text}" for n, (v, text) in enumerate(judged, 16)]
    if any(all(v in by for v in IN_PLACE) for by in points.values()):
        table, judged = in_place_section(points, suite_in_place, suite)
        lines[lines.index("## The predictions, checked") - 1:lines.index("## The predictions, checked") - 1] = table
        lines += ["", "And [scale-predictions-in-place.md](scale-predictions-in-place.md):", ""]
        lines += [f"{n}. **{v}.** {text}" for n, (v, text) in enumerate(judged, 19)]
    return "\n".join(lines) + "\n"


def _label(key: tuple) -> str:
    fabric = "" if key[4] == "leafspine" else f"{key[4]}, "
    churn = f", churn {key[5]:g}" if key[5] else ""
    return f"{fabric}{key[0]} GPUs/{key[1]} tenants/{key[2]:g}:1/{key[3]}{churn}"


def contended_section(points: Dict[tuple, Dict[str, List[dict]]], suite_contended: Optional[str],
                      suite_flux: Optional[str]) -> Tuple[List[str], List[Tuple[str, str]]]:
    """Flux ordered by contended capacity against Flux: a table of the map's points that have both, and the
    verdicts of predictions 16-18 (docs/scale-predictions-contended.md)."""
    keys = [k for k in sorted(points) if "flux-contended" in points[k] and "flux" in points[k]]
    lines = ["", "## Flux ordered by contended capacity", "",
             "`flux-contended` is Flux with `order=contended` (each job ranked by its GPU work per unit of the links' "
             "capacity, priced by the fluid program of all jobs together; docs/schedulers.md), on the map's points "
             "above (the same seeds and scenarios). Where it falls below Flux, the program's prices are the cause "
             "to look at: at its optimum many links keep slack and cost nothing, so a job whose ring crosses only "
             "those rises above every priced job, though in the runs those links are shared too (`python "
             "research/scale_map.py orders --gpus 256 --tenants 32 --oversubscription 2` prints both orders of "
             "one point and how many jobs go unpriced).", "",
             "| point | Crux | Flux | flux-contended | flux-contended / Flux | flux-contended / capacity |",
             "|---|---|---|---|---|---|"]
    ratio = {}
    for k in keys:
        ratio[k] = point_ratio(points, k, "flux-contended", "flux")
        cap = _mean([float(r["u_capacity_bound"]) for r in next(iter(points[k].values()))])
        lines.append(f"| {_label(k)} | {_cell([float(r['u']) for r in points[k].get('crux', []) if r['u']])} | "
                     f"{_cell([float(r['u']) for r in points[k]['flux'] if r['u']])} | "
                     f"{_cell([float(r['u']) for r in points[k]['flux-contended'] if r['u']])} | "
                     f"{_ratio(point_mean(points, k, 'flux-contended'), point_mean(points, k, 'flux'))} | "
                     f"{_ratio(point_mean(points, k, 'flux-contended'), cap)} |")
    judged = []
    crowded = [k for k in keys if k[4] == "leafspine" and not k[5] and k[3] == "random" and k[2] == 4 and k[1] >= 16]
    if crowded:
        ups = sum(1 for k in crowded if ratio[k] is not None and ratio[k] >= 1.03)
        downs = sum(1 for k in crowded if ratio[k] is not None and ratio[k] < 0.99)
        judged.append(("held" if ups >= 3 and not downs else "missed",
                       "flux-contended / Flux at 4:1, random, 16 tenants or more (1.03 or more at three, below 0.99 "
                       "at none): " + ", ".join(f"{_label(k)} {ratio[k]:.3f}" for k in crowded)))
    else:
        judged.append(("not measured", "no 4:1 point with 16 tenants or more has both variants"))
    calm = [k for k in keys if k[4] == "leafspine" and not k[5] and k[2] <= 2]
    if calm:
        inside = all(ratio[k] is not None and 0.98 <= ratio[k] <= 1.02 for k in calm)
        judged.append(("held" if inside else "missed", "flux-contended / Flux at 1:1 and 2:1 within 0.98-1.02: "
                       + ", ".join(f"{_label(k)} {ratio[k]:.3f}" for k in calm)))
    else:
        judged.append(("not measured", "no 1:1 or 2:1 point has both variants"))
    if suite_contended and suite_flux:
        pairs = suite_ratios(suite_contended, suite_flux, "flux-contended")
        lines += ["", f"On the fluid suite (`{suite_contended}/suite.csv` against `{suite_flux}/suite.csv`), "
                  "flux-contended / Flux: " + ", ".join(f"{name} {v:.3f}" for name, v in pairs.items()) + "."]
        judged.append(("held" if pairs and all(0.99 <= v <= 1.01 for v in pairs.values()) else "missed",
                       "flux-contended / Flux on every suite scenario within 0.99-1.01: "
                       + ", ".join(f"{name} {v:.3f}" for name, v in pairs.items())))
    else:
        judged.append(("not measured", "no suite of flux-contended"))
    return lines, judged


def suite_ratios(suite_variant: str, suite_flux: str, variant: str) -> Dict[str, float]:
    """Per scenario of a fluid suite: ``variant``'s mean utilisation (``suite_variant``/suite.csv) over Flux's
    (``suite_flux``/suite.csv)."""
    flux = {r["scenario"]: float(r["u_mean"]) for r in read_rows(os.path.join(suite_flux, "suite.csv"))
            if r["variant"] == "flux" and r["u_mean"]}
    mine = {r["scenario"]: float(r["u_mean"]) for r in read_rows(os.path.join(suite_variant, "suite.csv"))
            if r["variant"] == variant and r["u_mean"]}
    return {name: mine[name] / flux[name] for name in sorted(mine) if flux.get(name)}


IN_PLACE = ("flux-in-place", "flux-shared")


def in_place_section(points: Dict[tuple, Dict[str, List[dict]]], suite_in_place: Optional[str],
                     suite_flux: Optional[str]) -> Tuple[List[str], List[Tuple[str, str]]]:
    """The contended order kept in Crux's places (``flux-in-place``, ``flux-shared``) against Flux and
    ``flux-contended``: a table of the map's points that have them, and the verdicts of predictions 19-22
    (docs/scale-predictions-in-place.md)."""
    keys = [k for k in sorted(points) if all(v in points[k] for v in IN_PLACE + ("flux",))]
    lines = ["", "## The contended order kept in Crux's places", "",
             "`flux-in-place` keeps every job the fluid program leaves unpriced in Crux's place and reorders the "
             "priced jobs among their own places; `flux-shared` also prices a job on the fabric's links only, not "
             "on its own host links (`order=contended-in-place` and `shared-in-place`, docs/schedulers.md). Each "
             "column is the variant's utilisation over Flux's, means over the same seeds and scenarios.", "",
             "| point | Flux | flux-contended / Flux | flux-in-place / Flux | flux-shared / Flux "
             "| flux-shared / capacity |", "|---|---|---|---|---|---|"]
    ratio: Dict[str, Dict[tuple, Optional[float]]] = {v: {} for v in ("flux-contended",) + IN_PLACE}
    for k in keys:
        for v in ratio:
            ratio[v][k] = point_ratio(points, k, v, "flux") if v in points[k] else None
        cap = _mean([float(r["u_capacity_bound"]) for r in next(iter(points[k].values()))])
        lines.append(f"| {_label(k)} | {_cell([float(r['u']) for r in points[k]['flux'] if r['u']])} | "
                     + " | ".join("" if ratio[v][k] is None else f"{ratio[v][k]:.3f}" for v in ratio)
                     + f" | {_ratio(point_mean(points, k, 'flux-shared'), cap)} |")

    def listing(selected, variants):
        def one(k):
            return ", ".join(f"{v} {ratio[v][k]:.3f}" for v in variants if ratio[v][k] is not None)
        return "; ".join(f"{_label(k)} {one(k)}" for k in selected)

    plain = [k for k in keys if k[4] == "leafspine" and not k[5] and k[3] == "random"]
    judged = []
    crowded = [k for k in plain if k[2] == 4]
    if crowded and all(ratio["flux-contended"][k] is not None for k in crowded):
        held = all(abs(ratio[v][k] - ratio["flux-contended"][k]) <= 0.01 for k in crowded for v in IN_PLACE)
        judged.append(("held" if held else "missed", "each variant / Flux within 0.01 of flux-contended / Flux "
                       "at 4:1: " + listing(crowded, ("flux-contended",) + IN_PLACE)))
    else:
        judged.append(("not measured", "no 4:1 point has all three variants"))
    few = [k for k in plain if k[0] == 256 and k[2] == 2]
    if few:
        held = all(0.99 <= ratio[v][k] <= 1.01 for k in few for v in IN_PLACE)
        judged.append(("held" if held else "missed", "both variants / Flux within 0.99-1.01 at 256 GPUs, 2:1: "
                       + listing(few, ("flux-contended",) + IN_PLACE)))
    else:
        judged.append(("not measured", "no 256-GPU 2:1 point has both variants"))
    many = [k for k in plain if k[0] >= 1024 and k[2] == 2]
    if many:
        below = sum(1 for k in many if ratio["flux-in-place"][k] < 0.99)
        above = sum(1 for k in many if ratio["flux-shared"][k] >= ratio["flux-in-place"][k] + 0.01)
        judged.append(("held" if below >= 2 and above >= 2 else "missed",
                       f"flux-in-place below 0.99 x Flux at {below} of {len(many)} (two or more), flux-shared 0.01 "
                       f"or more above flux-in-place at {above} of {len(many)} (two or more): "
                       + listing(many, IN_PLACE)))
    else:
        judged.append(("not measured", "no 2:1 point of 1,024 GPUs or more has both variants"))
    if suite_in_place and suite_flux:
        pairs = {v: suite_ratios(suite_in_place, suite_flux, v) for v in IN_PLACE}
        for v in IN_PLACE:
            lines += ["", f"On the fluid suite (`{suite_in_place}/suite.csv` against `{suite_flux}/suite.csv`), "
                      f"{v} / Flux: " + ", ".join(f"{name} {x:.3f}" for name, x in pairs[v].items()) + "."]
        held = all(pairs[v] and all(0.99 <= x <= 1.01 for x in pairs[v].values()) for v in IN_PLACE)
        judged.append(("held" if held else "missed", "both variants / Flux on every suite scenario within "
                       "0.99-1.01: " + "; ".join(v + " " + ", ".join(f"{n} {x:.3f}" for n, x in pairs[v].items())
                                                 for v in IN_PLACE)))
    else:
        judged.append(("not measured", "no suite of the two variants"))
    return lines, judged


def churn_confirmation(folder: str):
    """The emulation's runs with tenants arriving (``confirm --churn``): a table, and the verdict of prediction 15
    of docs/scale-predictions-churn.md."""
    rows = read_rows(os.path.join(folder, "confirm.csv"))
    by = confirm_means(rows)
    schedulers = list(dict.fromkeys(r["scheduler"] for r in rows))
    emu = [r for r in rows if r["engine"] == "emulation"]
    faithful = sum(1 for r in emu if r["faithful"] == "True")
    first = rows[0] if rows else {}
    lines = ["", "## Confirmed in the emulation, tenants arriving", "",
             f"As above, with the tenants arriving as a Poisson process (mean gap {first.get('churn', '?')} emulated "
             "s) and Crux and Flux online; `flux-reorder` is Flux moving live operations to each new order, as Crux "
             f"does. From `{folder}/confirm.csv`. {faithful} of {len(emu)} emulation runs were judged faithful.", "",
             "| spines | engine | " + " | ".join(schedulers) + " |", "|---|---|" + "---|" * len(schedulers)]
    for (spines, engine) in sorted(by, key=lambda k: (-k[0], k[1])):
        cells = [_cell(by[(spines, engine)].get(s, [])) for s in schedulers]
        lines.append(f"| {spines} | {engine} | " + " | ".join(cells) + " |")
    parts, held = [], bool(by)
    for (spines, engine), u in sorted(by.items()):
        if engine != "emulation":
            continue
        if not all(u.get(s) for s in ("crux", "flux", "flux-reorder")):
            held = False
            continue
        moved, kept, crux = (_mean(u[s]) for s in ("flux-reorder", "flux", "crux"))
        held = held and moved >= kept - 0.01 and min(moved, kept) > crux
        parts.append(f"{spines} spines: Flux moving live operations {moved:.3f}, keeping them {kept:.3f}, "
                     f"Crux online {crux:.3f}")
    verdict = ("held" if held and parts else "missed" if parts else "not measured",
               ("; ".join(parts) + " (held when moving is no more than 0.01 below keeping and both are above Crux)."
                ) if parts else "no emulation runs with tenants arriving.")
    return lines, verdict


def target_lines(points: Dict[tuple, Dict[str, List[dict]]], suite: Optional[str],
                 suite_before: Optional[str]) -> List[str]:
    """Flux against its targets on every point of the map and, given a suite rerun, every suite scenario: at
    least 1.05 x Crux wherever the capacity-aware bound is 5% or more above Crux, and never below 0.99 x the best
    of ECMP, ByteScheduler and Crux."""
    rows = []  # (where, crux, flux, best, capacity bound)
    for key in sorted(points):
        u = {s: point_mean(points, key, s) for s in ("ecmp", "bytescheduler", "crux", "flux")}
        if u["crux"] is None or u["flux"] is None:
            continue
        cap = _mean([float(r["u_capacity_bound"]) for rows_ in points[key].values() for r in rows_])
        where = f"{key[4]}, churn {key[5]:g}, {key[0]} GPUs, {key[1]} tenants, {key[2]:g}:1, {key[3]}"
        rows.append((where, u["crux"], u["flux"], max(v for k, v in u.items() if k != "flux" and v), cap))
    if suite and suite_before:
        new = {(r["scenario"], r["variant"]): r for r in read_rows(os.path.join(suite, "suite.csv"))}
        old = {(r["scenario"], r["variant"]): r for r in read_rows(os.path.join(suite_before, "suite.csv"))}
        for scenario in sorted({k[0] for k in new}):
            base = {v: float(old[(scenario, v)]["u_mean"]) for v in ("ecmp", "bytescheduler", "crux")
                    if (scenario, v) in old and old[(scenario, v)]["u_mean"]}
            if "crux" not in base or (scenario, "flux") not in new:
                continue
            cap = float(old[(scenario, "crux")]["u_capacity_bound"])
            rows.append((f"suite (twin) {scenario}", base["crux"], float(new[(scenario, "flux")]["u_mean"]),
                         max(base.values()), cap))
    if not rows:
        return []
    room = [r for r in rows if r[4] >= 1.05 * r[1]]
    short = [r for r in room if r[2] < 1.05 * r[1]]
    below = [r for r in rows if r[2] < 0.99 * r[3]]
    out = ["", "## Flux against its targets", "",
           "Targets: Flux at least 1.05 x Crux wherever the capacity-aware bound is 5% or more above Crux, and never "
           "below 0.99 x the best of ECMP, ByteScheduler and Crux; on every point of the map above and every "
           "scenario of the fluid suite (Flux from the rerun with a path per flow, the others and the bounds from "
           "the committed suite). "
           f"Room of 5% or more above Crux: {len(room)} of {len(rows)}; Flux 1.05 x Crux or more there: "
           f"{len(room) - len(short)} of {len(room)}; Flux below 0.99 x the best baseline: {len(below)} of "
           f"{len(rows)}.", ""]
    if short or below:
        out += ["| where | Crux | Flux | best baseline | capacity bound | Flux / Crux | Flux / best | "
                "capacity / Crux | misses |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            misses = [m for m, bad in (("room not taken", r in short), ("below the best", r in below)) if bad]
            if misses:
                out.append(f"| {r[0]} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | {r[2] / r[1]:.3f} | "
                           f"{r[2] / r[3]:.3f} | {r[4] / r[1]:.3f} | {', '.join(misses)} |")
    return out


def confirm_means(rows: List[dict]) -> Dict[tuple, Dict[str, List[float]]]:
    """(spines, engine) -> scheduler -> utilisations of the confirmation runs that completed."""
    out: Dict[tuple, Dict[str, List[float]]] = {}
    for r in rows:
        if r["u"] not in ("", None):
            out.setdefault((int(r["spines"]), r["engine"]), {}).setdefault(r["scheduler"], []).append(float(r["u"]))
    return out


def twin_errors(rows: List[dict]) -> List[float]:
    """|twin - emulation| of every emulation run of a confirmation table that has its twin run."""
    twin_u = {(r["spines"], r["seed"], r["scheduler"]): float(r["u"]) for r in rows
              if r["engine"] == "fluid" and r["u"]}
    return [abs(twin_u[(r["spines"], r["seed"], r["scheduler"])] - float(r["u"])) for r in rows
            if r["engine"] == "emulation" and r["u"] and (r["spines"], r["seed"], r["scheduler"]) in twin_u]


def confirmation_table(folder: str) -> List[str]:
    rows = read_rows(os.path.join(folder, "confirm.csv"))
    if not rows:
        return []
    by = confirm_means(rows)
    schedulers = list(dict.fromkeys(r["scheduler"] for r in rows))
    emu = [r for r in rows if r["engine"] == "emulation"]
    faithful = sum(1 for r in emu if r["faithful"] == "True")
    errors = twin_errors(rows)
    first = rows[0]
    lines = ["", "## Confirmed in the emulation", "",
             f"{first['hosts']} hosts on a leaf-spine (leaves of 4 hosts), {first['tenants']} tenants of the four "
             "models in rings of equal size, random placement seeded by the run's seed (a placement per seed), "
             f"5 Mbit/s links; the same points in the twin. From `{folder}/confirm.csv` "
             "(`sudo python research/scale_map.py confirm ...`). "
             f"{faithful} of {len(emu)} emulation runs were judged faithful (docs/fidelity.md)"
             + (f"; the twin's error over these runs (|twin - emulation| per run): mean "
                f"{statistics.mean(errors):.3f}, max {max(errors):.3f}." if errors else "."), "",
             "| spines | engine | " + " | ".join(schedulers) + " | Flux / Crux | Flux / best |",
             "|---|---|" + "---|" * (len(schedulers) + 2)]
    for (spines, engine) in sorted(by, key=lambda k: (-k[0], k[1])):
        u = by[(spines, engine)]
        means = {s: _mean(u.get(s, [])) for s in schedulers}
        best = max((means[s] for s in schedulers if s != "flux" and means[s] is not None), default=None)
        lines.append(f"| {spines} | {engine} | " + " | ".join(_cell(u.get(s, [])) for s in schedulers)
                     + f" | {_ratio(means.get('flux'), means.get('crux'))} | {_ratio(means.get('flux'), best)} |")
    return lines


def suite_changes(suite: str, before: str) -> List[str]:
    """Flux's suite rows (scenario/variant) whose mean utilisation differs to the third decimal between two
    suite folders; None entries are rows missing from the rerun."""
    old = {(r["scenario"], r["variant"]): r for r in read_rows(os.path.join(before, "suite.csv"))}
    new = {(r["scenario"], r["variant"]): r for r in read_rows(os.path.join(suite, "suite.csv"))}
    changed = []
    for key, r in sorted(new.items()):
        if key in old and f"{float(r['u_mean']):.3f}" != f"{float(old[key]['u_mean']):.3f}":
            changed.append(f"{key[0]}/{key[1]} {float(old[key]['u_mean']):.3f} -> {float(r['u_mean']):.3f}")
    return changed


def verdicts(points: Dict[tuple, Dict[str, List[dict]]],
             before: Optional[Dict[tuple, Dict[str, List[dict]]]] = None) -> List[tuple]:
    """(held | missed | not measured, what decided it) for each numbered prediction of docs/scale-predictions.md,
    from the map's points: key (gpus, tenants, oversubscription, placement, fabric, churn) -> scheduler -> rows.
    Prediction 3 is about Flux as it was built then (a path per job): judged on ``before``, the first map."""
    def mean(key, scheduler):
        return point_mean(points, key, scheduler)

    def bound(key, column):
        return _mean([float(r[column]) for rows in points[key].values() for r in rows])

    def ratio(key, a, b):
        return point_ratio(points, key, a, b)

    def judge(keys, test, what):
        values = [(k, test(k)) for k in keys]
        values = [(k, v) for k, v in values if v is not None]
        if not values:
            return ("not measured", f"no point of the map has {what}")
        held = all(ok for _k, (ok, _x) in values)
        shown = ", ".join(f"{k[0]} GPUs/{k[1]} tenants/{k[2]:g}:1/{k[3]} {x}" for k, (_ok, x) in values)
        return ("held" if held else "missed", f"{what}: {shown}")

    keys = [k for k in sorted(points) if k[4] == "leafspine" and not k[5]]
    contended = [k for k in keys if k[3] == "random" and k[2] >= 2]
    calm = [k for k in keys if k[3] == "packed" and k[2] <= 1]
    out = []
    c1 = judge(contended, lambda k: None if ratio(k, "crux", "ecmp") is None else
               (ratio(k, "crux", "ecmp") > 1.3, f"{ratio(k, 'crux', 'ecmp'):.3f}"),
               "Crux / ECMP above 1.3 with random placement at 2:1 and more")
    c1b = judge(calm, lambda k: None if ratio(k, "crux", "ecmp") is None else
                (abs(ratio(k, "crux", "ecmp") - 1) < 0.05, f"{ratio(k, 'crux', 'ecmp'):.3f}"),
                "Crux / ECMP about 1.0 packed at 1:1")
    verdict = "held" if {c1[0], c1b[0]} <= {"held", "not measured"} and "held" in (c1[0], c1b[0]) else \
        ("not measured" if c1[0] == c1b[0] == "not measured" else "missed")
    out.append((verdict, f"{c1[1]}; {c1b[1]}."))
    gap = judge(contended, lambda k: (bound(k, "u_solo_bound") - bound(k, "u_capacity_bound") >= 0.1,
                                      f"solo {bound(k, 'u_solo_bound'):.3f}, capacity "
                                      f"{bound(k, 'u_capacity_bound'):.3f}"),
                "the capacity-aware bound 0.1 or more below the solo bound, random placement at 2:1 and more")
    near = judge(contended, lambda k: None if mean(k, "crux") is None else
                 (mean(k, "crux") >= 0.9 * bound(k, "u_capacity_bound"),
                  f"{mean(k, 'crux') / bound(k, 'u_capacity_bound'):.3f}"),
                 "Crux at 0.9 or more of the capacity-aware bound there")
    both = "held" if gap[0] == near[0] == "held" else ("not measured" if gap[0] == "not measured" else "missed")
    out.append((both, f"{gap[1]}; {near[1]}."))
    if before:
        then = verdicts(before)[2]
        out.append((then[0], "on the first map (Flux with a path per job, results/scale/map-256): " + then[1]))
    else:
        flux = judge(keys, lambda k: None if ratio(k, "flux", "crux") is None else
                     (0.99 <= ratio(k, "flux", "crux") <= 1.01, f"{ratio(k, 'flux', 'crux'):.3f}"),
                     "Flux / Crux within 0.99-1.01")
        out.append((flux[0], flux[1] + "."))
    out.append(("not measured", "the map has no variant with a class per job to measure compression's cost."))
    calm = {k[:5]: k for k in keys}
    churned = [(k, calm[k[:5]]) for k in sorted(points) if k[5] and k[:5] in calm]
    if not churned:
        out.append(("not measured", "the map has no tenants arriving and leaving yet."))
    else:
        parts, held = [], True
        for k, base in churned:
            lower = all((mean(k, s) or 0) < (mean(base, s) or 0) for s in ("ecmp", "bytescheduler", "crux", "flux"))
            narrower = ratio(k, "crux", "ecmp") < ratio(base, "crux", "ecmp")
            flux_ok = ratio(k, "flux", "crux") >= 1.0
            held = held and lower and narrower and flux_ok
            parts.append(f"{k[0]} GPUs/{k[1]} tenants/{k[2]:g}:1, mean gap {k[5]:g} s: every scheduler lower "
                         f"{'yes' if lower else 'no'}, Crux / ECMP {ratio(k, 'crux', 'ecmp'):.3f} against "
                         f"{ratio(base, 'crux', 'ecmp'):.3f} without churn, Flux / Crux {ratio(k, 'flux', 'crux'):.3f}")
        out.append(("held" if held else "missed", "; ".join(parts) + "."))
    pairs = [(k, (k[0], k[1], other_over, k[3], "lingjun-2tier", k[5])) for k in sorted(points) if k[4] == "lingjun"
             for other_over in {o[2] for o in points if o[4] == "lingjun-2tier"}]
    pairs = [(a, b) for a, b in pairs if b in points and ratio(a, "crux", "ecmp") and ratio(b, "crux", "ecmp")]
    if not pairs:
        out.append(("not measured", "the map has no production topology with its two-layer twin."))
    else:
        held = all(ratio(a, "crux", "ecmp") < ratio(b, "crux", "ecmp") for a, b in pairs)
        out.append(("held" if held else "missed", "Crux / ECMP on the production racks, three tiers against two: "
                    + ", ".join(f"{a[1]} tenants {ratio(a, 'crux', 'ecmp'):.3f} against {ratio(b, 'crux', 'ecmp'):.3f}"
                                for a, b in pairs) + "."))
    sizes = sorted({k[0] for k in keys})
    # Scale: the same tenants per uplink (ring size) and oversubscription at different GPU counts.
    same = {}
    for k in keys:
        if k[3] == "random":
            same.setdefault((k[0] // k[1], k[2]), []).append(k)
    groups = [g for g in same.values() if len({k[0] for k in g}) > 1]
    if groups:
        shown = []
        held = True

        def seed_ratios(k):
            crux = {r["seed"]: float(r["u"]) for r in points[k].get("crux", []) if r["u"]}
            ecmp = {r["seed"]: float(r["u"]) for r in points[k].get("ecmp", []) if r["u"]}
            return [crux[x] / ecmp[x] for x in crux if ecmp.get(x)]
        for g in groups:
            values = [(k, ratio(k, "crux", "ecmp")) for k in sorted(g)]
            spread = max(v for _k, v in values) - min(v for _k, v in values)
            seeds = max((max(r) - min(r) for r in map(seed_ratios, g) if r), default=0.0)
            held = held and spread <= seeds
            shown.append(", ".join(f"{k[0]} GPUs/{k[1]} tenants/{k[2]:g}:1 {v:.3f}" for k, v in values)
                         + f" (seed spread {seeds:.3f})")
        out.append(("held" if held else "missed", "Crux / ECMP at the same ring size and oversubscription over GPU "
                    "counts (held when the difference is within the seed spread): " + "; ".join(shown) + "."))
        return out
    out.append(("not measured" if len(sizes) < 2 else "see the table",
                f"GPU counts in the map: {', '.join(map(str, sizes)) or 'none'}."))
    return out


def path_verdicts(points: Dict[tuple, Dict[str, List[dict]]], confirm_rows: List[dict],
                  suite_changed: Optional[List[str]], before: Optional[Dict[tuple, Dict[str, List[dict]]]] = None
                  ) -> List[tuple]:
    """(verdict, what decided it) for predictions 8-14 of docs/scale-predictions-paths.md."""
    def mean(key, scheduler):
        return point_mean(points, key, scheduler)

    def ratio(key, a, b):
        return point_ratio(points, key, a, b)

    def name(k):
        return f"{k[0]} GPUs/{k[1]} tenants/{k[2]:g}:1/{k[3]}"

    def judge(keys, value, test, what):
        got = [(k, value(k)) for k in keys]
        got = [(k, v) for k, v in got if v is not None]
        if not got:
            return ("not measured", f"no point of the map has {what}")
        shown = ", ".join(f"{name(k)} {v:.3f}" for k, v in got)
        return ("held" if all(test(k, v) for k, v in got) else "missed", f"{what}: {shown}")

    def combine(*parts):
        verdicts_ = [v for v, _ in parts]
        verdict = ("missed" if "missed" in verdicts_ else "held" if "held" in verdicts_ else "not measured")
        return (verdict, "; ".join(t for _, t in parts) + ".")

    keys = [k for k in sorted(points) if k[4] == "leafspine" and not k[5]]
    few = [k for k in keys if k[3] == "random" and k[1] <= 16 and k[0] <= 256]
    packed = [k for k in keys if k[3] == "packed"]
    out = [combine(judge(few, lambda k: ratio(k, "flux", "crux"), lambda k, v: v >= 1.05,
                         "Flux / Crux 1.05 or more, random placement, 8 and 16 tenants"),
                   judge(packed, lambda k: ratio(k, "flux", "crux"), lambda k, v: 0.99 <= v <= 1.01,
                         "0.99-1.01 packed"))]
    many = [k for k in keys if k[3] == "random" and k[1] == 32 and k[0] <= 256]

    def smaller(k, v):
        others = [ratio(o, "flux", "crux") for o in few if o[2] == k[2]]
        others = [o for o in others if o is not None]
        return all(v < o for o in others) and (k[2] < 4 or 1.0 <= v <= 1.05)
    out.append(combine(judge(many, lambda k: ratio(k, "flux", "crux"), smaller,
                             "Flux / Crux at 32 tenants (below 8 and 16 tenants' at the same oversubscription, "
                             "1.00-1.05 at 4:1)")))
    out.append(combine(judge(keys, lambda k: ratio(k, "flux", "crux-hop"), lambda k, v: 0.99 <= v <= 1.01,
                             "Flux / Crux with a path per flow within 0.99-1.01")))

    def best(k):
        values = [mean(k, s) for s in ("ecmp", "bytescheduler", "crux")]
        values = [v for v in values if v is not None]
        return mean(k, "flux") / max(values) if values and mean(k, "flux") is not None else None
    out.append(combine(judge(keys, best, lambda k, v: v >= 0.99, "Flux / best baseline 0.99 or more")))

    def over_solo(k):
        solo = _mean([float(r["u_solo_bound"]) for rows in points[k].values() for r in rows])
        top = max((mean(k, s) for s in points[k] if mean(k, s) is not None), default=None)
        return None if top is None else top / solo

    def solo_of(table, k):
        return _mean([float(r["u_solo_bound"]) for rows in table[k].values() for r in rows])
    calm_random = [k for k in keys if k[3] == "random" and k[2] <= 1 and before and k in before]
    rise = judge(calm_random, lambda k: solo_of(points, k) - solo_of(before, k), lambda k, v: v >= 0.02,
                 "the solo bound's rise over the first map's, random placement at 1:1")
    out.append(combine(rise, judge(keys, over_solo, lambda k, v: v <= 1.0,
                                   "best scheduler / solo bound at most 1")))
    if suite_changed is None:
        out.append(("not measured", "no suite rerun was given to the report."))
    else:
        out.append(("held" if not suite_changed else "missed",
                    "Flux's rows of the fluid suite rerun against the committed suite, to the third decimal: "
                    + ("all equal." if not suite_changed else ", ".join(suite_changed) + ".")))
    by = confirm_means(confirm_rows)
    parts = []
    for spines in sorted({k[0] for k in by}, reverse=True):
        emu, flu = by.get((spines, "emulation"), {}), by.get((spines, "fluid"), {})
        if not (emu.get("flux") and emu.get("crux") and flu.get("flux") and flu.get("crux")):
            continue
        gain_e = _mean(emu["flux"]) - _mean(emu["crux"])
        gain_t = _mean(flu["flux"]) - _mean(flu["crux"])
        parts.append((spines, gain_e, gain_t))
    if not parts:
        out.append(("not measured", "no emulation confirmation in the report."))
    else:
        errors = twin_errors(confirm_rows)
        limit = statistics.mean(errors) if errors else 0.0
        ok = all(e > 0 and t > 0 and abs(e - t) <= limit for _, e, t in parts)
        out.append(("held" if ok else "missed",
                    "Flux minus Crux (utilisation, means over seeds), emulation against twin: "
                    + ", ".join(f"{s} spines {e:+.3f} against {t:+.3f}" for s, e, t in parts)
                    + f"; held when both are above 0 and differ by at most the twin's mean per-run error "
                    f"({limit:.3f})."))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="scale_map.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="measure the map's points into OUT/map.csv")

    def ints(text):
        return [int(x) for x in text.split(",") if x]
    r.add_argument("--fabric", choices=list(FABRICS), default="leafspine",
                   help="leafspine (--gpus, --oversubscription), or Crux's production racks (lingjun: three tiers, "
                        "lingjun-2tier: the same racks under spines; FABRICS)")
    r.add_argument("--churn", type=float, default=0.0, metavar="S",
                   help="tenants arrive as a Poisson process with this mean gap (emulated s; 0: all at the start); "
                        "Crux and Flux then run online, hearing of each arrival and departure")
    r.add_argument("--gpus", type=ints, default=[256])
    r.add_argument("--tenants", type=ints, default=[8, 16, 32])
    r.add_argument("--oversubscription", type=lambda t: [float(x) for x in t.split(",") if x], default=[1.0, 2.0])
    r.add_argument("--placement", choices=["random", "spread", "packed"], default="random")
    r.add_argument("--seeds", type=ints, default=[1, 2])
    r.add_argument("--schedulers", default=",".join(SCHEDULERS),
                   help="comma-separated: shipped schedulers (their defaults) and " + ", ".join(VARIANTS))
    r.add_argument("--rate", type=float, default=5.0, help="host and fabric link rate, Mbit/s (default 5)")
    r.add_argument("--out", required=True)
    o = sub.add_parser("orders", help="one point's job order under Crux, order=contended and "
                       "order=contended-in-place (prints them)")
    o.add_argument("--fabric", choices=list(FABRICS), default="leafspine")
    o.add_argument("--gpus", type=int, default=256)
    o.add_argument("--tenants", type=int, default=32)
    o.add_argument("--oversubscription", type=float, default=2.0)
    o.add_argument("--placement", choices=["random", "spread", "packed"], default="random")
    o.add_argument("--seed", type=int, default=1)
    o.add_argument("--rate", type=float, default=5.0)
    c = sub.add_parser("confirm", help="emulation confirmations (root): OUT/confirm.csv")
    c.add_argument("--leaves", type=int, default=4)
    c.add_argument("--hosts-per-leaf", type=int, default=4)
    c.add_argument("--spines", type=ints, default=[4, 2])
    c.add_argument("--tenants", type=int, default=4)
    c.add_argument("--seeds", type=ints, default=[1, 2, 3])
    c.add_argument("--schedulers", default="crux,flux")
    c.add_argument("--rate", type=float, default=5.0, help="host and fabric link rate, Mbit/s (default 5)")
    c.add_argument("--churn", type=float, default=0.0, metavar="S",
                   help="tenants arrive with this mean gap (emulated s), as in run; Crux and Flux then run online")
    c.add_argument("--runs", default="/tmp/scale-confirm-runs", help="where the emulation runs' folders go")
    c.add_argument("--out", required=True)
    g = sub.add_parser("report", help="the Markdown of docs/scale.md from a map folder")
    g.add_argument("folder")
    g.add_argument("--md", default=None, help="write it to this file as well")
    g.add_argument("--confirm", default=None, metavar="DIR", help="the emulation's confirmations (DIR/confirm.csv)")
    g.add_argument("--confirm-churn", default=None, metavar="DIR",
                   help="the emulation's confirmations with tenants arriving (DIR/confirm.csv)")
    g.add_argument("--suite", default=None, metavar="DIR", help="a fluid suite rerun of Flux (DIR/suite.csv)")
    g.add_argument("--before", default=None, metavar="DIR", help="the first map (its solo bounds, DIR/map.csv)")
    g.add_argument("--suite-before", default="results/suite/fluid", metavar="DIR",
                   help="the suite it is compared with (default: %(default)s)")
    g.add_argument("--suite-contended", default=None, metavar="DIR",
                   help="a fluid suite of flux-contended (DIR/suite.csv), against --suite's flux")
    g.add_argument("--suite-in-place", default=None, metavar="DIR",
                   help="a fluid suite of flux-in-place and flux-shared (DIR/suite.csv), against --suite's flux")
    args = p.parse_args(argv)
    if args.command == "orders":
        return orders(args)
    if args.command in ("run", "confirm"):
        try:
            return run(args) if args.command == "run" else confirm(args)
        except ValueError as exc:
            sys.stderr.write(f"scale_map.py: {exc}\n")
            return 2
    text = report(args.folder, args.confirm, args.suite, args.suite_before if args.suite else None, args.before,
                  args.confirm_churn, args.suite_contended, args.suite_in_place)
    print(text, end="")
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
