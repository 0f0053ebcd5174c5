#!/usr/bin/env python3
"""Paper figures from a sweep folder (scripts/sweep.py) or from a single run folder (testbed/run.py).

    python scripts/plot.py results/sweep-NAME [--out DIR] [--format png,pdf]

Figures (each written in every --format, 3.4 in wide for one column of a two-column paper, 8 pt text,
colour-blind-safe Okabe-Ito colours with a fixed colour, hatch, marker and line style per scheduler so that all
figures agree and survive greyscale printing; no titles, only axis labels and legends):

* ``gpu_utilization``: cluster GPU utilisation per scheduler (workers' ground truth, summary.json ``cluster``),
  bar = mean over seeds, error bar = min-max over seeds. With one condition (scenario and --set values) the jobs
  get their own bar groups next to the cluster; with several conditions the groups are the conditions.
* ``iteration_cdf``: CDF of iteration times, one panel per job, one line per scheduler, pooled over seeds, from
  the workers' iteration records (workers/<job>-r<rank>.jsonl; iteration k lasts as long as its slowest rank, the
  definition of workloads/truth.py). One file per condition (the first unsuffixed).
* ``link_classes``: traffic leaving the busiest leaf on its uplinks over time, stacked by priority class, for
  one run (``--run``, else the first successful run whose scheduler changed classes). Per-flow byte counters
  (flow_stats.csv) of forward data flows between leaves (controller.json gives each rank's host and leaf) are
  split over the classes the flow had during each polling interval (decisions.csv; class 0 before a flow's first
  decision), in proportion to time. The uplink port counters (port_stats.csv, all traffic) are drawn on top as a
  check, with the uplink capacity.
* ``reconstruction``: GPU idle time per iteration reconstructed from the counters versus the workers' truth, one
  point per job and run (summary.json ``reconstruction.jobs``), with y = x.
* ``reconstruction_vs_poll``: idle-time error as a fraction of the iteration time versus the polling interval
  (``reconstruction.by_poll_interval``; longer intervals are the same counters thinned), mean and min-max over runs.

Only runs with ``ok: true`` are plotted (a ``--run`` given by name is used as it is). A figure whose data are
missing is skipped with a note; ``captions.md`` next to the figures says what each shows, from which runs, and
what was skipped.
"""
from __future__ import annotations

import argparse
import bisect
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402

from core.fabric import leaf_name  # noqa: E402
from experiment import results  # noqa: E402
from experiment.results import CLUSTER, RunRecord  # noqa: E402

COLUMN_WIDTH_IN = 3.4
FONT_PT = 8
FORMATS = ("png", "pdf", "svg")
SCHEDULER_ORDER = ("ecmp", "bytescheduler", "crux", "flux")
# Okabe-Ito; the baseline in grey, the proposed scheduler in the most salient colour.
SCHEDULER_COLOURS = {"ecmp": "#999999", "bytescheduler": "#E69F00", "crux": "#009E73", "flux": "#D55E00"}
SPARE_COLOURS = ("#0072B2", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
HATCHES = ("", "///", "...", "xx", "\\\\\\", "++", "oo")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1)))
NUM_CLASSES = 8


class Skip(Exception):
    """A figure cannot be drawn from the data at hand; the message says why."""


# ------------------------------------------------------------------------------------------------ data
@dataclass
class Results:
    source: str
    records: List[RunRecord]
    rows: List[dict]
    axes: List[str]
    from_csv: bool = False
    notes: List[str] = field(default_factory=list)
    include_unfaithful: bool = False

    def usable(self, ok, faithful) -> bool:
        """A run's figures are drawn when it succeeded and, unless asked otherwise, its emulation was faithful
        (the runner exits with 3 for the others: their figures are not the scheduler's)."""
        return truthy(ok) and (self.include_unfaithful or faithful not in (False, "False"))

    @property
    def ok_records(self) -> List[RunRecord]:
        return [r for r in self.records if self.usable(r.ok, r.summary.faithful if r.summary else None)]

    @property
    def unfaithful_runs(self) -> List[str]:
        if self.from_csv:
            return unique(r["run_id"] for r in self.rows if truthy(r.get("ok")) and r.get("faithful") == "False")
        return [r.id for r in self.records if r.ok and r.summary and r.summary.faithful is False]


def truthy(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def num(value) -> Optional[float]:
    """A finite float, or None for missing, empty or NaN values (CSV cells are strings)."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def unique(items) -> list:
    seen, out = set(), []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def scheduler_order(names) -> List[str]:
    names = set(names)
    return [s for s in SCHEDULER_ORDER if s in names] + sorted(names - set(SCHEDULER_ORDER))


def scheduler_style(scheduler: str, all_schedulers: Sequence[str]) -> dict:
    """Colour, hatch, marker and line style of a scheduler, fixed across figures."""
    extra = [s for s in scheduler_order(all_schedulers) if s not in SCHEDULER_COLOURS]
    if scheduler in SCHEDULER_COLOURS:
        colour = SCHEDULER_COLOURS[scheduler]
        i = SCHEDULER_ORDER.index(scheduler)
    else:
        j = extra.index(scheduler) if scheduler in extra else 0
        colour = SPARE_COLOURS[j % len(SPARE_COLOURS)]
        i = len(SCHEDULER_ORDER) + j
    return {"color": colour, "hatch": HATCHES[i % len(HATCHES)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[i % len(LINESTYLES)]}


def parse_filters(items: Sequence[str]) -> Dict[str, set]:
    filters: Dict[str, set] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--filter {item!r}: expected KEY=V1[,V2]")
        key, values = item.split("=", 1)
        filters.setdefault(key.strip(), set()).update(v.strip() for v in values.split(","))
    return filters


def matches(params: dict, filters: Dict[str, set]) -> bool:
    return all(results.format_value(params.get(k)) in v or str(params.get(k, "")) in v for k, v in filters.items())


def load_results(results_dir: str, filters: Dict[str, set], include_unfaithful: bool = False) -> Results:
    records, axes = results.discover_runs(results_dir)
    csv_path = os.path.join(results_dir, results.SUMMARY_CSV)
    if records:
        records = [r for r in records if matches(r.params, filters)]
        rows = [row for r in records for row in results.summary_rows(r, axes)]
        return Results(results_dir, records, rows, axes, include_unfaithful=include_unfaithful)
    if os.path.isfile(csv_path):
        # Only the table was kept (e.g. copied from the testbed machine): the per-run figures are skipped.
        rows, axes = results.read_summary_csv(csv_path)
        rows = [r for r in rows if matches(r, filters)]
        return Results(results_dir, [], rows, axes, from_csv=True, include_unfaithful=include_unfaithful)
    return Results(results_dir, [], [], [])


def condition(params: dict, axes: Sequence[str]) -> Tuple[Tuple[str, str], ...]:
    """What separates runs that must not be pooled: the scenario and every --set axis (not seed, not scheduler)."""
    return tuple((k, results.format_value(params.get(k))) for k in ["scenario"] + list(axes))


def condition_labels(conds: Sequence[tuple]) -> Dict[tuple, str]:
    """Short labels that name only the components that differ between the conditions."""
    if not conds:
        return {}
    varying = [i for i in range(len(conds[0])) if len({c[i][1] for c in conds}) > 1]
    labels = {}
    for c in conds:
        parts = []
        for i in varying:
            k, v = c[i]
            parts.append(v if k == "scenario" else f"{k[len('param.'):] if k.startswith('param.') else k}={v}")
        labels[c] = ", ".join(parts) or c[0][1]
    return labels


def run_list(ids: Sequence[str], limit: int = 60) -> str:
    ids = list(ids)
    shown = ", ".join(f"`{i}`" for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


# ------------------------------------------------------------------------------------------------ style
def apply_style() -> None:
    plt.rcParams.update({
        "font.size": FONT_PT, "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT,
        "legend.fontsize": FONT_PT, "legend.title_fontsize": FONT_PT, "font.family": "sans-serif",
        "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "lines.linewidth": 1.2,
        "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
        "legend.handlelength": 1.6, "legend.columnspacing": 1.0, "hatch.linewidth": 0.5,
        # Type 42 (TrueType) fonts in PDFs: required by most paper submission systems.
        "pdf.fonttype": 42, "ps.fonttype": 42, "savefig.dpi": 300,
    })


def new_figure(height_in: float, nrows: int = 1, ncols: int = 1, **kw):
    return plt.subplots(nrows, ncols, figsize=(COLUMN_WIDTH_IN, height_in), layout="constrained", squeeze=False,
                        **kw)


def legend_columns(labels: Sequence[str], width_in: float = COLUMN_WIDTH_IN - 0.1) -> int:
    """As many legend columns as fit across the figure (rough 8 pt metrics), at least one."""
    char_in, entry_in = 0.6 * FONT_PT / 72, 3.4 * FONT_PT / 72  # a character; handle plus spacing
    for ncol in range(len(labels), 1, -1):
        rows = [labels[i::ncol] for i in range(ncol)]  # not exact for column-major filling, close enough
        widest = [max(len(x) for x in col) for col in rows if col]
        if sum(w * char_in + entry_in for w in widest) <= width_in:
            return ncol
    return 1


def save(fig, out_dir: str, name: str, formats: Sequence[str]) -> List[str]:
    paths = []
    for fmt in formats:
        path = os.path.join(out_dir, f"{name}.{fmt}")
        fig.savefig(path)
        paths.append(path)
    plt.close(fig)
    return paths


# ------------------------------------------------------------------------------------------------ a) GPU utilisation
def fig_gpu_utilization(res: Results, out: str, formats: Sequence[str]) -> Tuple[List[str], str]:
    rows = [r for r in res.rows
            if res.usable(r.get("ok"), r.get("faithful")) and num(r.get("gpu_utilization")) is not None]
    if not rows:
        raise Skip("no successful run with a GPU utilisation")
    conds = unique(condition(r, res.axes) for r in rows)
    scheds = scheduler_order({r["scheduler"] for r in rows})
    if len(conds) == 1:
        jobs = unique(r["job"] for r in rows if r["job"] != CLUSTER)
        groups: list = [CLUSTER] + jobs
        labels = ["cluster"] + jobs

        def key(r):
            return r["job"]
    else:
        rows = [r for r in rows if r["job"] == CLUSTER]
        groups = conds
        names = condition_labels(conds)
        labels = [names[c] for c in conds]

        def key(r):
            return condition(r, res.axes)
    values: Dict[tuple, List[float]] = defaultdict(list)
    runs = set()
    for r in rows:
        values[(key(r), r["scheduler"])].append(num(r["gpu_utilization"]))
        runs.add(r["run_id"])
    fig, axs = new_figure(2.1)
    ax = axs[0][0]
    x = np.arange(len(groups))
    width = 0.8 / len(scheds)
    counts = set()
    for i, s in enumerate(scheds):
        st = scheduler_style(s, scheds)
        xs, means, lo, hi = [], [], [], []
        for g, xi in zip(groups, x):
            v = values.get((g, s))
            if not v:
                continue
            counts.add(len(v))
            m = float(np.mean(v))
            xs.append(xi + (i - (len(scheds) - 1) / 2) * width)
            means.append(m)
            # max(0, ...): the mean of equal values can differ from them in the last bit.
            lo.append(max(m - min(v), 0.0))
            hi.append(max(max(v) - m, 0.0))
        ax.bar(xs, means, width, color=st["color"], hatch=st["hatch"], edgecolor="black", linewidth=0.4, label=s)
        if any(lo) or any(hi):
            ax.errorbar(xs, means, yerr=[lo, hi], fmt="none", ecolor="black", elinewidth=0.6, capsize=1.5)
    ax.set_ylabel("GPU utilisation")
    ax.set_ylim(0, 1.0)
    ax.set_xticks(x, labels, rotation=30 if len(groups) > 4 or max(len(s) for s in labels) > 10 else 0,
                  ha="right" if len(groups) > 4 or max(len(s) for s in labels) > 10 else "center")
    ax.tick_params(axis="x", length=0)
    fig.legend(loc="outside upper center", ncol=legend_columns(scheds))
    files = save(fig, out, "gpu_utilization", formats)
    n = ", ".join(str(c) for c in sorted(counts))
    what = ("the cluster (left group) and each job" if len(conds) == 1
            else "the cluster under each condition (" + "; ".join(labels) + ")")
    caption = (f"GPU utilisation (busy fraction of the GPUs from the workers' own logs; cluster = mean over jobs "
               f"weighted by their GPUs) of {what}, per scheduler. Bar height = mean over seeds, error bars = "
               f"min-max over seeds ({n} seed(s) per bar). Successful runs only ({len(runs)}): "
               f"{run_list(sorted(runs))}.")
    return files, caption


# ------------------------------------------------------------------------------------------------ b) iteration CDF
def fig_iteration_cdf(res: Results, out: str, formats: Sequence[str], warmup: int = 0) -> List[Tuple[List[str], str]]:
    records = res.ok_records
    if not records:
        raise Skip("no successful run folder" + (" (only summary.csv found)" if res.from_csv else ""))
    by_cond: Dict[tuple, List[RunRecord]] = defaultdict(list)
    for r in records:
        by_cond[condition(r.params, res.axes)].append(r)
    conds = list(by_cond)
    names = condition_labels(conds)
    made = []
    for ci, cond in enumerate(conds):
        data: Dict[str, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
        used = []
        for r in by_cond[cond]:
            got = False
            for job in r.summary.jobs if r.summary else []:
                times = r.folder.iteration_times(job.name, warmup)
                if times:
                    data[job.name][r.params["scheduler"]].extend(times)
                    got = True
            if got:
                used.append(r.id)
        if not data:
            res.notes.append(f"iteration_cdf: no iteration records for {names[cond]}")
            continue
        jobs = list(data)
        scheds = scheduler_order({s for d in data.values() for s in d})
        ncols = 1 if len(jobs) == 1 else 2
        nrows = math.ceil(len(jobs) / ncols)
        fig, axs = new_figure(0.45 + 1.45 * nrows, nrows, ncols)
        for idx, job in enumerate(jobs):
            ax = axs[idx // ncols][idx % ncols]
            for s in scheds:
                v = np.sort(np.asarray(data[job].get(s, []), dtype=float))
                if not len(v):
                    continue
                st = scheduler_style(s, scheds)
                y = np.arange(1, len(v) + 1) / len(v)
                ax.step(np.concatenate([[v[0]], v]), np.concatenate([[0.0], y]), where="post", color=st["color"],
                        linestyle=st["linestyle"], label=s)
            ax.set_xlabel(f"{job}: iteration time (s)")
            ax.set_ylim(0, 1.02)
            if idx % ncols == 0:
                ax.set_ylabel("CDF")
        for idx in range(len(jobs), nrows * ncols):
            axs[idx // ncols][idx % ncols].set_visible(False)
        handles, labels = [], []
        for row in axs:
            for ax in row:
                for h, lab in zip(*ax.get_legend_handles_labels()):
                    if lab not in labels:
                        handles.append(h)
                        labels.append(lab)
        order = [labels.index(s) for s in scheds if s in labels]
        fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="outside upper center",
                   ncol=legend_columns([labels[i] for i in order]))
        name = "iteration_cdf" if ci == 0 else f"iteration_cdf_{results.safe_name(names[cond])}"
        files = save(fig, out, name, formats)
        caption = (f"Empirical CDF of iteration times per job ({names[cond]}), one line per scheduler, iterations "
                   f"of all seeds pooled" + (f", first {warmup} iteration(s) left out" if warmup else "")
                   + ". An iteration lasts as long as its slowest rank (worker logs, `type: iteration` records). "
                   f"Runs ({len(used)}): {run_list(used)}.")
        made.append((files, caption))
    if not made:
        raise Skip("no iteration records in the worker logs or summaries")
    return made


# ------------------------------------------------------------------------------------------------ c) link classes
def _spread(bins: np.ndarray, t0: float, width: float, a: float, b: float, amount: float) -> None:
    """Add ``amount`` spread uniformly over [a, b] to time bins of ``width`` starting at ``t0``."""
    if b <= a:
        return
    first = max(int((a - t0) // width), 0)
    last = min(int((b - t0) // width), len(bins) - 1)
    for i in range(first, last + 1):
        lo, hi = t0 + i * width, t0 + (i + 1) * width
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0:
            bins[i] += amount * overlap / (b - a)


def class_segments(t0: float, t1: float, timeline: Sequence[Tuple[float, int]]) -> List[Tuple[float, float, int]]:
    """[(start, end, class)] covering [t0, t1] from a sorted decision timeline (class 0 before the first one)."""
    times = [t for t, _ in timeline]
    i = bisect.bisect_right(times, t0)
    cls = timeline[i - 1][1] if i > 0 else 0
    out, start = [], t0
    while i < len(timeline) and timeline[i][0] < t1:
        if timeline[i][0] > start:
            out.append((start, timeline[i][0], cls))
            start = timeline[i][0]
        cls = timeline[i][1]
        i += 1
    out.append((start, t1, cls))
    return out


def counter_increments(series: Sequence[Tuple[float, int]]) -> List[Tuple[float, float, int]]:
    """(t0, t1, bytes) between successive polls of a cumulative counter; a drop is a reset (re-installed rule)."""
    out = []
    for (t0, b0), (t1, b1) in zip(series, series[1:]):
        d = b1 - b0 if b1 >= b0 else b1
        if d > 0 and t1 > t0:
            out.append((t0, t1, d))
    return out


@dataclass
class UplinkTraffic:
    leaf: int
    t0: float
    width: float
    by_class: Dict[int, np.ndarray]
    ports: Optional[np.ndarray]
    capacity_mbps: Optional[float]
    flows: int


def leaf_uplink_by_class(run_dir: str, leaf: Optional[int] = None, bin_s: Optional[float] = None) -> UplinkTraffic:
    """Mbit/s per priority class of the forward inter-leaf data flows leaving ``leaf`` (default: the busiest)."""
    folder = results.RunFolder(run_dir)
    for name in (folder.FLOW_STATS, folder.DECISIONS, folder.CONTROLLER_CONFIG):
        if not folder.has(name):
            raise Skip(f"no {name} in {os.path.basename(run_dir)}")
    ctl = folder.controller_config()
    if ctl is None:
        raise Skip(f"unreadable {folder.CONTROLLER_CONFIG} in {os.path.basename(run_dir)}")
    layout = ctl.layout
    ip_leaf = {h.ip: h.leaf for h in layout.hosts}
    flow_leaves: Dict[Tuple[int, int], Tuple[int, int]] = {}  # (job index, rank) -> (src leaf, dst leaf)
    for job in ctl.jobs:
        for rank in range(job.workers):
            flow = job.flow(rank, 0)
            if flow.src_ip in ip_leaf and flow.dst_ip in ip_leaf:
                flow_leaves[(job.index, rank)] = (ip_leaf[flow.src_ip], ip_leaf[flow.dst_ip])
    if not flow_leaves:
        raise Skip("controller.json has no jobs with hosts on known leaves")
    series = folder.flow_series_by_switch()
    timelines = folder.class_timelines()

    # Per leaf: the increments of each crossing flow's counter (taken where the flow enters the fabric).
    increments: Dict[int, List[Tuple[tuple, List[Tuple[float, float, int]]]]] = defaultdict(list)
    for key, per_dpid in series.items():
        leaves = flow_leaves.get((key[0], key[2]))
        if leaves is None or leaves[0] == leaves[1]:
            continue
        pts = (per_dpid.get(layout.dpid_of[leaf_name(leaves[0])])
               or max(per_dpid.values(), key=lambda p: max(b for _, b in p)))
        increments[leaves[0]].append((key, counter_increments(pts)))
    totals = {lf: sum(d for _, inc in flows for _, _, d in inc) for lf, flows in increments.items()}
    if not totals or max(totals.values()) <= 0:
        raise Skip("no data bytes on flows between leaves in flow_stats.csv")
    if leaf is None:
        leaf = max(totals, key=lambda lf: totals[lf])
    elif leaf not in totals:
        raise Skip(f"no inter-leaf data flows leave leaf {leaf}")
    flows = increments[leaf]
    starts = [a for _, inc in flows for a, _, _ in inc]
    ends = [b for _, inc in flows for _, b, _ in inc]
    # Two polling intervals per bin by default: the counters are stamped when the switch's reply arrives, and
    # that jitter (easily half an interval) would otherwise show up as spikes.
    width = bin_s or 2 * (folder.poll_interval_s() or ctl.poll_interval_s)
    t0, t1 = min(starts), max(ends)
    nbins = max(int(math.ceil((t1 - t0) / width)), 1)
    by_class: Dict[int, np.ndarray] = {}
    for key, inc in flows:
        tl = timelines.get(key, [])
        for a, b, d in inc:
            for s, e, cls in class_segments(a, b, tl):
                arr = by_class.setdefault(cls, np.zeros(nbins))
                _spread(arr, t0, width, s, e, d * (e - s) / (b - a))
    scale = 8 / width / 1e6  # bytes per bin -> Mbit/s
    by_class = {c: v * scale for c, v in sorted(by_class.items())}

    ports = None
    # The leaf's uplinks: its ports that face other switches, from the fabric's graph.
    up_ports = {port for port, _nxt in layout.neighbours[leaf_name(leaf)]}
    uplinks = {port: pts for (dpid, port), pts in folder.port_series("tx_bytes").items()
               if dpid == layout.dpid_of[leaf_name(leaf)] and port in up_ports}
    if uplinks:
        ports = np.zeros(nbins)
        for pts in uplinks.values():
            for a, b, d in counter_increments(pts):
                _spread(ports, t0, width, a, b, d)
        ports *= scale
    capacity = len(up_ports) * layout.spec.fabric_rate_mbps
    return UplinkTraffic(leaf, t0, width, by_class, ports, capacity, len(flows))


def class_colour(cls: int):
    # Classes are ordered (7 served first): a sequential, colour-blind-safe map, darkest for class 0.
    return plt.get_cmap("viridis")(cls / (NUM_CLASSES - 1))


def pick_link_run(res: Results, wanted: Optional[str]) -> RunRecord:
    if wanted:
        for r in res.records:
            if wanted in (r.id, os.path.basename(r.path), r.summary.run_id if r.summary else None):
                return r
        raise Skip(f"--run {wanted}: no such run in {res.source}")
    candidates = [r for r in res.ok_records
                  if all(r.folder.has(n) for n in (r.folder.FLOW_STATS, r.folder.DECISIONS,
                                                   r.folder.CONTROLLER_CONFIG))]
    if not candidates:
        raise Skip("no successful run with flow_stats.csv, decisions.csv and controller.json")
    # A run whose scheduler changed classes shows what the figure is about; an ECMP run would be all class 0.
    for r in candidates:
        if any(cls != 0 for timeline in r.folder.class_timelines().values() for _, cls in timeline):
            return r
    return candidates[0]


def fig_link_classes(res: Results, out: str, formats: Sequence[str], run: Optional[str] = None,
                     bin_s: Optional[float] = None) -> Tuple[List[str], str]:
    if not res.records:
        raise Skip("no run folders" + (" (only summary.csv found)" if res.from_csv else ""))
    rec = pick_link_run(res, run)
    tr = leaf_uplink_by_class(rec.path, bin_s=bin_s)
    total = sum(tr.by_class.values())
    busy = np.nonzero(total > 0)[0]
    lo, hi = max(busy[0] - 1, 0), min(busy[-1] + 2, len(total))
    edges = tr.t0 + np.arange(lo, hi + 1) * tr.width
    x = edges - edges[0]
    fig, axs = new_figure(2.0)
    ax = axs[0][0]
    base = np.zeros(hi - lo)
    for cls, v in tr.by_class.items():
        top = base + v[lo:hi]
        ax.fill_between(x, np.append(base, base[-1]), np.append(top, top[-1]), step="post", color=class_colour(cls),
                        linewidth=0)
        base = top
    if tr.ports is not None:
        p = tr.ports[lo:hi]
        ax.step(x, np.append(p, p[-1]), where="post", color="black", linewidth=0.6,
                label="all traffic (port counters)")
    if tr.capacity_mbps:
        ax.axhline(tr.capacity_mbps, color="black", linestyle="--", linewidth=0.8, label="capacity")
    # Faults the run applied (summary.json's fault timeline), where they fall in the window shown.
    timeline = (rec.summary.extra.get("faults") if rec.summary is not None else None) or []
    faults = [(f["applied_at"] - edges[0], f["fault"]) for f in timeline
              if f.get("applied_at") and edges[0] <= f["applied_at"] <= edges[-1]]
    for i, (t, text) in enumerate(faults):
        ax.axvline(t, color="tab:red", linewidth=0.8, linestyle=":", label="fault" if i == 0 else None)
        ax.annotate(text, (t, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                    fontsize="x-small", color="tab:red")
    ax.set_xlabel("Time (s)")
    ax.set_ylabel(f"Leaf {tr.leaf} uplink (Mbit/s)")
    ax.set_xlim(0, x[-1])
    ax.set_ylim(0, None)
    # Classes are ordered, so a discrete colour bar reads better than eight legend entries.
    cmap = matplotlib.colors.ListedColormap([class_colour(c) for c in range(NUM_CLASSES)])
    norm = matplotlib.colors.BoundaryNorm(np.arange(NUM_CLASSES + 1) - 0.5, NUM_CLASSES)
    cbar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, ticks=range(NUM_CLASSES),
                        aspect=25, pad=0.02)
    cbar.set_label("Priority class (7 first)")
    cbar.ax.tick_params(length=0)
    cbar.outline.set_linewidth(0.4)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside upper center", ncol=2)
    files = save(fig, out, "link_classes", formats)
    classes = ", ".join(str(c) for c in tr.by_class)
    caption = (f"Traffic from leaf {tr.leaf} (the busiest) on its uplinks over time in run `{rec.id}` "
               f"({rec.params.get('scheduler')}): the {tr.flows} forward data flows between leaves that enter the "
               f"fabric at this leaf, from their byte counters (flow_stats.csv) in {tr.width:g} s bins, stacked by "
               f"the priority class each flow had at the time (decisions.csv; class 0 before a flow's first "
               f"decision; 7 is served first; classes seen: {classes}). Thin black line: all traffic on the leaf's "
               f"uplink ports (port counters, including ACKs and other traffic)"
               + (f"; dashed: uplink capacity {tr.capacity_mbps:g} Mbit/s" if tr.capacity_mbps else "")
               + (f"; dotted red: the faults applied ({'; '.join(text for _, text in faults)})." if faults else "."))
    return files, caption


# ------------------------------------------------------------------------------------------------ d) reconstruction
def fig_reconstruction(res: Results, out: str, formats: Sequence[str]) -> Tuple[List[str], str]:
    points: Dict[str, List[Tuple[float, float]]] = defaultdict(list)
    used = []
    for r in res.ok_records:
        jobs = (r.summary.reconstruction if r.summary else {}).get("jobs") or {}
        got = False
        for entry in jobs.values():
            if not isinstance(entry, dict):
                continue
            x, y = num(entry.get("true_idle_per_iteration_s")), num(entry.get("idle_per_iteration_s"))
            if x is not None and y is not None:
                points[r.params["scheduler"]].append((x, y))
                got = True
        if got:
            used.append(r.id)
    if not points:
        raise Skip("no reconstruction with true and reconstructed idle times in the summaries")
    scheds = scheduler_order(points)
    fig, axs = new_figure(2.5)
    ax = axs[0][0]
    top = max(max(x, y) for v in points.values() for x, y in v)
    top = top * 1.08 if top > 0 else 1.0
    ax.plot([0, top], [0, top], color="black", linestyle="--", linewidth=0.7)
    ax.text(0.03 * top, 0.97 * top, "dashed: y = x", ha="left", va="top")  # top left, away from the data
    for s in scheds:
        st = scheduler_style(s, scheds)
        xs, ys = zip(*points[s])
        ax.scatter(xs, ys, s=14, marker=st["marker"], facecolor=st["color"], edgecolor="black", linewidth=0.3,
                   label=s, zorder=3)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel("True idle per iteration (s)")
    ax.set_ylabel("Reconstructed idle per iteration (s)")
    fig.legend(loc="outside upper center", ncol=legend_columns(scheds), handlelength=1.2)
    files = save(fig, out, "reconstruction", formats)
    n = sum(len(v) for v in points.values())
    caption = (f"GPU idle time per iteration reconstructed from the controller's per-flow byte counters alone "
               f"(testbed/reconstruct.py, at each run's own polling interval) versus the workers' ground truth; one "
               f"point per job and run ({n} points), dashed: y = x (above it: idle time overestimated). "
               f"Runs ({len(used)}): {run_list(used)}.")
    return files, caption


def fig_reconstruction_vs_poll(res: Results, out: str, formats: Sequence[str]) -> Tuple[List[str], str]:
    data: Dict[str, Dict[float, List[float]]] = defaultdict(lambda: defaultdict(list))
    used = []
    for r in res.ok_records:
        rows = (r.summary.reconstruction if r.summary else {}).get("by_poll_interval") or []
        got = False
        for row in rows:
            if not isinstance(row, dict):
                continue
            p, e = num(row.get("poll_interval_s")), num(row.get("idle_mae_frac_of_iteration"))
            if p is not None and e is not None and p > 0:
                data[r.params["scheduler"]][round(p, 6)].append(e)
                got = True
        if got:
            used.append(r.id)
    if not data:
        raise Skip("no reconstruction.by_poll_interval in the summaries")
    scheds = scheduler_order(data)
    fig, axs = new_figure(2.1)
    ax = axs[0][0]
    polls = sorted({p for d in data.values() for p in d})
    top = 0.0
    for s in scheds:
        st = scheduler_style(s, scheds)
        ps = sorted(data[s])
        mean = np.array([np.mean(data[s][p]) for p in ps])
        lo = np.clip(mean - np.array([min(data[s][p]) for p in ps]), 0, None)
        hi = np.clip(np.array([max(data[s][p]) for p in ps]) - mean, 0, None)
        ax.errorbar(ps, mean, yerr=[lo, hi], color=st["color"], marker=st["marker"], markersize=3.5,
                    linestyle=st["linestyle"], linewidth=1.0, elinewidth=0.6, capsize=1.5, label=s)
        top = max(top, float(np.max(mean + hi)))
    if polls[-1] / polls[0] >= 4:
        ax.set_xscale("log")
        ax.set_xticks(polls, [f"{p:g}" for p in polls])
        ax.minorticks_off()
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)
    ax.set_xlabel("Polling interval (s)")
    ax.set_ylabel("Idle error / iteration time")
    fig.legend(loc="outside upper center", ncol=legend_columns(scheds))
    files = save(fig, out, "reconstruction_vs_poll", formats)
    caption = (f"Error of the reconstructed GPU idle time per iteration, as a fraction of the true iteration time "
               f"(mean absolute error over the jobs of a run), versus the counter polling interval; intervals "
               f"above a run's own are its counters thinned to every k-th poll. Line: mean over runs, error bars: "
               f"min-max over runs. Runs ({len(used)}): {run_list(used)}.")
    return files, caption


# ------------------------------------------------------------------------------------------------ main
def write_captions(out: str, res: Results, made: List[Tuple[str, List[str], str]], skipped: List[Tuple[str, str]]):
    usable_ids = {r["run_id"] for r in res.rows if res.usable(r.get("ok"), r.get("faithful"))}
    ok = len(res.ok_records) if not res.from_csv else len(usable_ids)
    total = len(res.records) if not res.from_csv else len({r["run_id"] for r in res.rows})
    unfaithful = res.unfaithful_runs
    lines = ["# Figures", "",
             f"Source: `{os.path.abspath(res.source)}` ({total} run(s), {ok} drawn"
             + (", from summary.csv only" if res.from_csv else "") + ").", ""]
    if unfaithful:
        lines += [("Included although" if res.include_unfaithful else "Left out because")
                  + f" their emulation was not faithful (fidelity warnings): {run_list(unfaithful)}.", ""]
    for name, files, caption in made:
        exts = ", ".join(os.path.basename(f) for f in files)
        lines += [f"## {name}", "", f"Files: {exts}", "", caption, ""]
    if skipped or res.notes:
        lines += ["## Skipped", ""]
        lines += [f"- {name}: {why}" for name, why in skipped]
        lines += [f"- {note}" for note in res.notes]
        lines.append("")
    path = os.path.join(out, "captions.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="plot.py",
        description="Draw the paper figures (GPU utilisation, iteration-time CDFs, link utilisation by priority\n"
                    "class, idle-time reconstruction) from a sweep folder or a single run folder, and write\n"
                    "captions.md next to them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n"
               "  python scripts/plot.py results/sweep-headline\n"
               "  python scripts/plot.py results/sweep-alpha --filter param.alpha=0.7 --out figs --format pdf\n"
               "  python scripts/plot.py results/20261202-121914-flux-default-s1\n\n"
               "A figure whose data are missing is skipped with a note (also listed in captions.md).")
    p.add_argument("results", metavar="RESULTS_DIR",
                   help="a sweep folder (run sub-folders and/or summary.csv) or one run folder")
    p.add_argument("--out", metavar="DIR", help="where the figures go (default: RESULTS_DIR/figures)")
    p.add_argument("--format", default="png,pdf", metavar="FMT[,FMT]",
                   help=f"comma-separated output formats among {', '.join(FORMATS)} (default: %(default)s)")
    p.add_argument("--run", metavar="ID",
                   help="run for the link_classes figure (default: the first successful run whose scheduler "
                        "changed priority classes)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=V1[,V2]",
                   help="keep only runs whose scheduler, scenario, seed or --set axis (e.g. host-rate, "
                        "param.alpha) has one of these values (repeatable)")
    p.add_argument("--include-unfaithful", action="store_true",
                   help="also draw runs whose emulation was not faithful (runner exit code 3); left out by default")
    p.add_argument("--warmup", type=int, default=0, metavar="K",
                   help="leave the first K iterations of every job out of the CDFs (default: %(default)s)")
    p.add_argument("--bin", type=float, default=None, metavar="S",
                   help="time bin of the link_classes figure (default: twice the run's polling interval)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if not formats or bad:
        sys.stderr.write(f"plot.py: --format: unsupported {', '.join(bad) or '(none)'}; use {', '.join(FORMATS)}\n")
        return 2
    if args.warmup < 0 or (args.bin is not None and args.bin <= 0):
        sys.stderr.write("plot.py: --warmup must be >= 0 and --bin > 0\n")
        return 2
    if not os.path.isdir(args.results):
        sys.stderr.write(f"plot.py: no such folder: {args.results}\n")
        return 2
    try:
        filters = parse_filters(args.filter)
    except ValueError as exc:
        sys.stderr.write(f"plot.py: {exc}\n")
        return 2
    res = load_results(args.results, filters, args.include_unfaithful)
    if not res.records and not res.rows:
        sys.stderr.write(f"plot.py: no runs (summary.json/config.json) or summary.csv in {args.results}"
                         + (" matching --filter" if filters else "") + "\n")
        return 2
    out = args.out or os.path.join(args.results, "figures")
    os.makedirs(out, exist_ok=True)
    apply_style()
    made: List[Tuple[str, List[str], str]] = []
    skipped: List[Tuple[str, str]] = []
    figures = [
        ("gpu_utilization", lambda: [fig_gpu_utilization(res, out, formats)]),
        ("iteration_cdf", lambda: fig_iteration_cdf(res, out, formats, args.warmup)),
        ("link_classes", lambda: [fig_link_classes(res, out, formats, args.run, args.bin)]),
        ("reconstruction", lambda: [fig_reconstruction(res, out, formats)]),
        ("reconstruction_vs_poll", lambda: [fig_reconstruction_vs_poll(res, out, formats)]),
    ]
    for name, draw in figures:
        try:
            for files, caption in draw():
                made.append((os.path.splitext(os.path.basename(files[0]))[0], files, caption))
                print(f"wrote {', '.join(results.display_path(f) for f in files)}")
        except Skip as exc:
            skipped.append((name, str(exc)))
            print(f"skipped {name}: {exc}")
        except Exception as exc:  # malformed data in one run must not cost the other figures
            plt.close("all")
            skipped.append((name, f"error: {type(exc).__name__}: {exc}"))
            print(f"skipped {name}: {type(exc).__name__}: {exc}")
    for note in res.notes:
        print(f"note: {note}")
    path = write_captions(out, res, made, skipped)
    print(f"wrote {results.display_path(path)}")
    return 0
