"""The twin's network: directed links with capacities from the fabric's graph, routes, and the rate allocation.

Links are those of ``core.fabric.FabricLayout``: host -> leaf and leaf -> host at the host rate, and both
directions of every switch-to-switch link at the fabric rate (hosts are named by IP, switches by name, as
``FabricView.hop_links`` names them). A route is the list of link ids of one hop on one of its equal-cost paths
(``FabricView.paths``; the decision's path index, taken modulo the hop's number of paths as the controller does).

Rates (``allocate``) follow the data plane's two class modes:

* ``strict``: classes are served from 7 down; inside a class, flows share what the higher classes left by
  max-min fairness (progressive filling: raise every flow's rate together, freeze the flows of a link when it
  fills, go on with the others). ``floor`` reserves a share of each link for every lower class that has a flow
  on it (HTB's guaranteed rate per class, 1% by default on the testbed), so a lower class is never starved below
  its floor;
* ``weighted``: class c is entitled to 2^c / sum of 2^k over the classes active on the link (2^c/255 of a busy
  link when all eight are active); what a class cannot use (its flows are held back elsewhere) goes to the
  other classes on the link in proportion to their weights, and flows share their class's part max-min fairly.
  It is computed by a few rounds of redistribution, exact when no class leaves capacity unused and within a
  fraction of a percent otherwise.

Hashed (ECMP) paths: ``hashed_path`` maps a flow's 5-tuple and a seed with CRC-32 onto one of its equal-cost
paths, fixed for the flow's life, as a switch's hash of the 5-tuple does. Which flows collide is then a function
of the seed; report results over several seeds.
"""
from __future__ import annotations

import zlib
from typing import Dict, List, Optional, Tuple

import numpy as np

from core.classes import NUM_CLASSES
from core.fabric import FabricLayout, FabricView, pick_path
from core.model import FlowKey

CLASS_MODES = ("strict", "weighted")
WEIGHTED_ROUNDS = 6
_REL = 1e-9


class Network:
    """Every directed link of a fabric, its capacity in bits/s, and the routes between hosts."""

    def __init__(self, layout: FabricLayout, view: Optional[FabricView] = None, goodput: float = 1.0):
        self.layout = layout
        self.view = view or layout.view()
        names: List[Tuple[str, str]] = []
        rates: List[float] = []
        spec = layout.spec
        for h in layout.hosts:
            leaf = self.view.leaf_names[h.leaf - 1]
            names += [(h.ip, leaf), (leaf, h.ip)]
            rates += [spec.host_rate_mbps, spec.host_rate_mbps]
        for link in layout.links:
            names += [(link.a, link.b), (link.b, link.a)]
            rates += [spec.fabric_rate_mbps, spec.fabric_rate_mbps]
        self.names = names
        self.index: Dict[Tuple[str, str], int] = {n: i for i, n in enumerate(names)}
        self.capacity = np.asarray(rates, dtype=float) * 1e6 * goodput
        self._routes: Dict[Tuple[str, str, int], Tuple[int, ...]] = {}

    @property
    def links(self) -> int:
        return len(self.names)

    def n_paths(self, src_ip: str, dst_ip: str) -> int:
        return len(self.view.paths(src_ip, dst_ip))

    def route(self, src_ip: str, dst_ip: str, path: int) -> Tuple[int, ...]:
        """Link ids of the hop ``src_ip`` -> ``dst_ip`` on its path ``path`` (modulo its number of paths)."""
        key = (src_ip, dst_ip, path)
        out = self._routes.get(key)
        if out is None:
            choices = self.view.paths(src_ip, dst_ip)
            nodes = (src_ip,) + pick_path(choices, path) + (dst_ip,)
            out = self._routes[key] = tuple(self.index[link] for link in zip(nodes, nodes[1:]))
        return out


def hashed_path(flow: FlowKey, n_paths: int, seed: int) -> int:
    """The equal-cost path a hash of the flow's 5-tuple picks (CRC-32 over the tuple and the seed)."""
    if n_paths <= 1:
        return 0
    text = f"{seed}|{flow.src_ip}|{flow.dst_ip}|{flow.src_port}|{flow.dst_port}|{flow.proto}"
    return zlib.crc32(text.encode()) % n_paths


def maxmin(flow_of: np.ndarray, link_of: np.ndarray, flows: int, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of ``flows`` flows; incidence pair i says flow ``flow_of[i]`` crosses ``link_of[i]``
    (a flow crossing a link twice counts twice). Progressive filling, all bottlenecks of a level at once."""
    rate = np.zeros(flows)
    if flows == 0 or flow_of.size == 0:
        return rate
    # Work on the links the flows use only: a few hundred of a large fabric's thousands.
    used_links, link = np.unique(link_of, return_inverse=True)
    residual = np.maximum(capacity[used_links].astype(float), 0.0)
    n_links = used_links.size
    f = flow_of
    while f.size:
        count = np.bincount(link, minlength=n_links)
        used = count > 0
        share = np.full(n_links, np.inf)
        share[used] = residual[used] / count[used]
        per_inc = share[link]
        level = per_inc.min()
        frozen = np.zeros(flows, dtype=bool)
        frozen[f[per_inc <= level * (1 + _REL) + 1e-300]] = True
        rate[frozen] = level
        hit = frozen[f]
        residual -= np.bincount(link[hit], minlength=n_links) * level
        np.maximum(residual, 0.0, out=residual)
        f, link = f[~hit], link[~hit]
    return rate


def incidence(routes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(flow index, link id) pairs of a padded route matrix (one row per flow, -1 after the last link)."""
    rows, cols = np.nonzero(routes >= 0)
    return rows, routes[rows, cols]


def allocate(routes: np.ndarray, classes: np.ndarray, capacity: np.ndarray, mode: str = "strict",
             floor: float = 0.0) -> np.ndarray:
    """Rate (bits/s) of every flow: ``routes`` is a padded matrix of link ids (one row per flow), ``classes``
    each flow's priority class 0..7, ``capacity`` every link's capacity. See the module docstring."""
    if mode not in CLASS_MODES:
        raise ValueError(f"class mode must be one of {', '.join(CLASS_MODES)} (got {mode!r})")
    flow_of, link_of = incidence(routes)
    return allocate_flows(flow_of, link_of, routes.shape[0], classes, capacity, mode, floor)


def allocate_flows(flow_of: np.ndarray, link_of: np.ndarray, flows: int, classes: np.ndarray, capacity: np.ndarray,
                   mode: str = "strict", floor: float = 0.0) -> np.ndarray:
    """``allocate`` on an incidence list (flow ``flow_of[i]`` crosses link ``link_of[i]``; a flow that crosses a
    link k times carries k times its rate there)."""
    if mode not in CLASS_MODES:
        raise ValueError(f"class mode must be one of {', '.join(CLASS_MODES)} (got {mode!r})")
    rate = np.zeros(flows)
    if flows == 0:
        return rate
    n_links = capacity.size
    inc_class = classes[flow_of]
    present = np.bincount(inc_class * n_links + link_of, minlength=NUM_CLASSES * n_links) \
        .reshape(NUM_CLASSES, n_links) > 0
    if mode == "strict":
        return _strict(flow_of, link_of, inc_class, classes, capacity, present, floor, rate)
    return _weighted(flow_of, link_of, inc_class, classes, capacity, present, rate)


def _subset(flow_of, link_of, inc_class, classes, c):
    """Incidence of the flows of class c, with flows renumbered 0..k-1; also their original indexes."""
    members = np.flatnonzero(classes == c)
    local = np.full(classes.size, -1)
    local[members] = np.arange(members.size)
    sel = inc_class == c
    return members, local[flow_of[sel]], link_of[sel]


def _strict(flow_of, link_of, inc_class, classes, capacity, present, floor, rate):
    used = np.zeros(capacity.size)
    # Classes below c with a flow on the link: each keeps its floor out of what class c may take.
    lower = np.cumsum(present, axis=0) - present
    for c in range(NUM_CLASSES - 1, -1, -1):
        if not present[c].any():
            continue
        members, f, link = _subset(flow_of, link_of, inc_class, classes, c)
        avail = capacity - used - floor * capacity * lower[c]
        r = maxmin(f, link, members.size, np.maximum(avail, 0.0))
        rate[members] = r
        used += np.bincount(link, weights=r[f], minlength=capacity.size)
    return rate


def _weighted(flow_of, link_of, inc_class, classes, capacity, present, rate):
    weight = (2.0 ** np.arange(NUM_CLASSES))[:, None] * present
    total = weight.sum(axis=0)
    total[total == 0] = 1.0
    share = capacity[None, :] * weight / total
    subsets = {c: _subset(flow_of, link_of, inc_class, classes, c) for c in range(NUM_CLASSES) if present[c].any()}
    for _ in range(WEIGHTED_ROUNDS):
        usage = np.zeros_like(share)
        for c, (members, f, link) in subsets.items():
            r = maxmin(f, link, members.size, share[c])
            rate[members] = r
            usage[c] = np.bincount(link, weights=r[f], minlength=capacity.size)
        # A class that filled its share on a link would take more there; what the others leave goes to it.
        full = (usage >= share * (1 - 1e-6)) & present
        spare = np.maximum(capacity - usage.sum(axis=0), 0.0)
        if not (spare > capacity * 1e-6).any():
            break
        w_full = weight * full
        denom = w_full.sum(axis=0)
        grow = np.divide(spare, denom, out=np.zeros_like(spare), where=denom > 0)
        share = np.where(full, usage + w_full * grow[None, :], usage)
    return rate


def link_loads(routes: np.ndarray, rates: np.ndarray, n_links: int) -> np.ndarray:
    """Sum of the rates on every link."""
    flow_of, link_of = incidence(routes)
    return np.bincount(link_of, weights=rates[flow_of], minlength=n_links)
