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

Inside a class the sharing can also be alpha-fair (``alpha_fair``; the model's ``share_alpha``): a flow crossing
several busy links then gets less than max-min gives it, as a TCP flow with a longer round trip and more loss
does.

Hashed (ECMP) paths, two hash models (``hashed_path``), each fixed for a flow's life:

* ``ovs`` (the default): Open vSwitch's own choice, so that the twin's flows collide where the emulation's do.
  A select group without a selection method gets the ``dp_hash`` method with the symmetric L3/L4 hash and basis
  0 (Open vSwitch 3.1, ofproto-dpif.c ``group_set_selection_method``): MurmurHash3 steps over (source XOR
  destination address, protocol, source XOR destination port) in network byte order (lib/flow.c
  ``flow_hash_symmetric_l3l4``, lib/hash.h), and the bucket is ``hash_map[hash & mask]``, the table that
  Webster's method fills for equal weights (16 slots for up to 16 buckets: 0, 1, 0, 1, ... for two). The testbed
  fixes every 5-tuple, so this choice is the same in every run and ignores the seed. Exact for a leaf-spine (one
  choice, at the ingress leaf); on a fat-tree the switches choose hop by hop, which the path index only
  approximates.
* ``salted``: BLAKE2b of the 5-tuple keyed by the seed, a salted switch hash: which flows collide is a function
  of the seed; run several seeds to see the spread. (CRC-32, used by an earlier version, is affine: a new seed
  flipped the same bits of every flow's hash, so every seed gave the same collisions.)
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress
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
        self.rate_mbps = np.asarray(rates, dtype=float)       # as configured (the class FIFOs are sized on it)
        self.capacity = self.rate_mbps * 1e6 * goodput
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


HASH_MODELS = ("ovs", "salted")
_MASK32 = 0xFFFFFFFF


def _rot32(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _MASK32


def _mhash_add(hash_: int, data: int) -> int:
    """lib/hash.h ``mhash_add`` (a MurmurHash3 step; zero data leaves the hash unmixed but rotated)."""
    if data:
        data = (data * 0xcc9e2d51) & _MASK32
        data = _rot32(data, 15)
        hash_ ^= (data * 0x1b873593) & _MASK32
    return (_rot32(hash_, 13) * 5 + 0xe6546b64) & _MASK32


def _mhash_finish(hash_: int) -> int:
    hash_ ^= hash_ >> 16
    hash_ = (hash_ * 0x85ebca6b) & _MASK32
    hash_ ^= hash_ >> 13
    hash_ = (hash_ * 0xc2b2ae35) & _MASK32
    return hash_ ^ (hash_ >> 16)


def ovs_symmetric_l3l4(flow: FlowKey, basis: int = 0) -> int:
    """``flow_hash_symmetric_l3l4(flow, basis, false)`` of Open vSwitch 3.1 for an IPv4 TCP flow. The fields are
    XORed in network byte order and read as host (little-endian) integers, as the C code does."""
    addresses = int(ipaddress.IPv4Address(flow.src_ip)) ^ int(ipaddress.IPv4Address(flow.dst_ip))
    ports = flow.src_port ^ flow.dst_port
    hash_ = _mhash_add(basis, int.from_bytes(addresses.to_bytes(4, "big"), "little"))
    hash_ = _mhash_add(hash_, flow.proto)
    hash_ = _mhash_add(hash_, int.from_bytes(ports.to_bytes(2, "big"), "little"))
    return _mhash_finish(hash_ ^ basis)


@functools.lru_cache(maxsize=None)
def ovs_hash_map(n_buckets: int) -> Tuple[int, ...]:
    """The bucket of every dp_hash slot for ``n_buckets`` equal-weight buckets (ofproto-dpif.c
    ``group_setup_dp_hash_table``: at least 16 slots, a power of two; Webster's method, first bucket on ties)."""
    slots = max(16, 1 << max(n_buckets - 1, 0).bit_length())
    divisor, value, out = [1] * n_buckets, [1.0] * n_buckets, []
    for _ in range(slots):
        winner = max(range(n_buckets), key=lambda b: (value[b], -b))
        divisor[winner] += 2
        value[winner] = 1.0 / divisor[winner]
        out.append(winner)
    return tuple(out)


def hashed_path(flow: FlowKey, n_paths: int, seed: int, model: str = "ovs") -> int:
    """The equal-cost path a switch's hash of the flow's 5-tuple picks (module docstring: the two models)."""
    if n_paths <= 1:
        return 0
    if model == "ovs":
        table = ovs_hash_map(n_paths)
        return table[ovs_symmetric_l3l4(flow) & (len(table) - 1)]
    if model != "salted":
        raise ValueError(f"hash model must be one of {', '.join(HASH_MODELS)} (got {model!r})")
    text = f"{flow.src_ip}|{flow.dst_ip}|{flow.src_port}|{flow.dst_port}|{flow.proto}"
    digest = hashlib.blake2b(text.encode(), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big") % n_paths


def maxmin(flow_of: np.ndarray, link_of: np.ndarray, flows: int, capacity: np.ndarray,
           weight: Optional[np.ndarray] = None) -> np.ndarray:
    """Max-min fair rates of ``flows`` flows; incidence pair i says flow ``flow_of[i]`` crosses ``link_of[i]``
    (a flow crossing a link twice counts twice). Progressive filling, all bottlenecks of a level at once. With
    ``weight`` (one positive number per flow), weighted max-min: a flow gets its weight times its bottleneck's
    level."""
    rate = np.zeros(flows)
    if flows == 0 or flow_of.size == 0:
        return rate
    weight = np.ones(flows) if weight is None else np.asarray(weight, dtype=float)
    # Work on the links the flows use only: a few hundred of a large fabric's thousands.
    used_links, link = np.unique(link_of, return_inverse=True)
    residual = np.maximum(capacity[used_links].astype(float), 0.0)
    n_links = used_links.size
    f = flow_of
    while f.size:
        count = np.bincount(link, weights=weight[f], minlength=n_links)
        used = count > 0
        share = np.full(n_links, np.inf)
        share[used] = residual[used] / count[used]
        per_inc = share[link]
        level = per_inc.min()
        frozen = np.zeros(flows, dtype=bool)
        frozen[f[per_inc <= level * (1 + _REL) + 1e-300]] = True
        rate[frozen] = level * weight[frozen]
        hit = frozen[f]
        residual -= np.bincount(link[hit], weights=weight[f[hit]], minlength=n_links) * level
        np.maximum(residual, 0.0, out=residual)
        f, link = f[~hit], link[~hit]
    return rate


def alpha_fair(flow_of: np.ndarray, link_of: np.ndarray, flows: int, capacity: np.ndarray, alpha: float,
               weight: Optional[np.ndarray] = None, prices: Optional[np.ndarray] = None, iterations: int = 400,
               tolerance: float = 1e-3) -> np.ndarray:
    """Weighted alpha-fair rates (Mo and Walrand): maximise the sum over flows of w x^(1-alpha) / (1-alpha) (log x
    at 1) on the links' capacities. Proportional fairness is alpha 1; TCP Reno's sharing, read as an
    optimisation, is alpha 2 (minimum potential delay, Kelly; Low 2003); max-min is the limit of large alpha. A
    flow that crosses several busy links gets less than max-min gives it, the flows that cross one of them more.

    Solved in the dual: every link has a price p, a flow's rate is (w / sum of its links' prices)^(1/alpha), and a
    link's price is scaled by (load / capacity)^(alpha/2) until every priced link is full (within ``tolerance``);
    the rates are then scaled down onto the capacities, so the result is always feasible. ``prices`` (one per
    link of ``capacity``), if given, holds the prices to start from and receives the final ones: consecutive
    allocations differ by a few flows, and starting from the last prices saves most of the iterations. Every
    flow must cross a link of finite capacity (a backlogged flow has no other limit)."""
    rate = np.zeros(flows)
    if flows == 0 or flow_of.size == 0:
        return rate
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0 (got {alpha})")
    weight = np.ones(flows) if weight is None else np.asarray(weight, dtype=float)
    cap_all = np.maximum(capacity.astype(float), 0.0)
    stopped = np.zeros(flows, dtype=bool)
    stopped[flow_of[cap_all[link_of] <= 0]] = True      # a link with nothing left stops its flows
    if stopped.any():
        keep = ~stopped[flow_of]
        flow_of, link_of = flow_of[keep], link_of[keep]
        if not flow_of.size:
            return rate
    used_links, link = np.unique(link_of, return_inverse=True)
    cap = cap_all[used_links]
    n_links = used_links.size
    busy = np.bincount(link, minlength=n_links).astype(float)
    # Start each link at the last price it had, or at the price that would give its flows equal shares were it
    # their only link; a price that has fallen near zero (the link went idle) starts a little above it.
    price = (busy / cap) ** alpha
    if prices is not None:
        price = np.maximum(prices[used_links], price * 1e-4)
    step = alpha / 2.0
    for _ in range(iterations):
        q = np.bincount(flow_of, weights=price[link], minlength=flows)
        x = (weight / np.where(q > 0, q, 1.0)) ** (1.0 / alpha)
        load = np.bincount(link, weights=x[flow_of], minlength=n_links)
        ratio = load / cap
        # Done when no link is over its capacity and a link left with spare capacity adds next to nothing to
        # the prices of the flows that cross it.
        slack = (ratio < 1 - tolerance)[link]
        if (ratio <= 1 + tolerance).all() and (price[link[slack]] < tolerance * q[flow_of[slack]]).all():
            break
        price *= np.power(np.maximum(ratio, 1e-6), step)
    if prices is not None:
        prices[used_links] = price
    over = np.ones(flows)
    np.maximum.at(over, flow_of, ratio[link])
    rate = x / over
    rate[stopped] = 0.0
    return rate


def first_come(flow_of: np.ndarray, link_of: np.ndarray, flows: int, capacity: np.ndarray,
               order: np.ndarray) -> np.ndarray:
    """Rates of ``flows`` flows served first come, first served: in increasing ``order`` (ties by index), each
    flow takes what its path has left (its tightest link's residual, a link it crosses k times counting k
    times). A FIFO serves a burst that came first before the ones behind it."""
    rate = np.zeros(flows)
    if flows == 0 or flow_of.size == 0:
        return rate
    residual = np.maximum(capacity.astype(float), 0.0)
    by_flow = np.argsort(flow_of, kind="stable")
    bounds = np.searchsorted(flow_of[by_flow], np.arange(flows + 1))
    for f in np.lexsort((np.arange(flows), order)):
        links, count = np.unique(link_of[by_flow[bounds[f]:bounds[f + 1]]], return_counts=True)
        if not links.size:
            continue
        r = float(np.min(residual[links] / count))
        rate[f] = r
        residual[links] -= r * count
        np.maximum(residual, 0.0, out=residual)
    return rate


def _share(f, link, flows, capacity, weight=None, order=None, order_share=0.0, alpha=0.0, prices=None):
    """One class's rates on ``capacity``: max-min (weighted), alpha-fair with ``alpha`` above 0, or with ``order``
    that share of it served first come, first served (a mix of two feasible allocations is feasible)."""
    if alpha > 0:
        r = alpha_fair(f, link, flows, capacity, alpha, weight, prices)
    else:
        r = maxmin(f, link, flows, capacity, weight)
    if order is not None and order_share > 0:
        r = (1.0 - order_share) * r + order_share * first_come(f, link, flows, capacity, order)
    return r


def incidence(routes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(flow index, link id) pairs of a padded route matrix (one row per flow, -1 after the last link)."""
    rows, cols = np.nonzero(routes >= 0)
    return rows, routes[rows, cols]


def allocate(routes: np.ndarray, classes: np.ndarray, capacity: np.ndarray, mode: str = "strict",
             floor: float = 0.0, weight: Optional[np.ndarray] = None, order: Optional[np.ndarray] = None,
             order_share: float = 0.0, alpha: float = 0.0, prices: Optional[np.ndarray] = None) -> np.ndarray:
    """Rate (bits/s) of every flow: ``routes`` is a padded matrix of link ids (one row per flow), ``classes``
    each flow's priority class 0..7, ``capacity`` every link's capacity, ``weight`` (optional) each flow's weight
    inside its class (weighted max-min); with ``order`` (each flow's arrival), ``order_share`` of each class's
    part is served first come, first served; with ``alpha`` above 0 flows share their class's part alpha-fairly
    (``alpha_fair``) instead of max-min, starting from and updating ``prices`` (one row of link prices per class)
    if given. See the module docstring."""
    if mode not in CLASS_MODES:
        raise ValueError(f"class mode must be one of {', '.join(CLASS_MODES)} (got {mode!r})")
    flow_of, link_of = incidence(routes)
    return allocate_flows(flow_of, link_of, routes.shape[0], classes, capacity, mode, floor, weight, order,
                          order_share, alpha, prices)


def allocate_flows(flow_of: np.ndarray, link_of: np.ndarray, flows: int, classes: np.ndarray, capacity: np.ndarray,
                   mode: str = "strict", floor: float = 0.0, weight: Optional[np.ndarray] = None,
                   order: Optional[np.ndarray] = None, order_share: float = 0.0, alpha: float = 0.0,
                   prices: Optional[np.ndarray] = None) -> np.ndarray:
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
        return _strict(flow_of, link_of, inc_class, classes, capacity, present, floor, rate, weight, order,
                       order_share, alpha, prices)
    return _weighted(flow_of, link_of, inc_class, classes, capacity, present, rate, weight, order, order_share,
                     alpha, prices)


def _subset(flow_of, link_of, inc_class, classes, c):
    """Incidence of the flows of class c, with flows renumbered 0..k-1; also their original indexes."""
    members = np.flatnonzero(classes == c)
    local = np.full(classes.size, -1)
    local[members] = np.arange(members.size)
    sel = inc_class == c
    return members, local[flow_of[sel]], link_of[sel]


def _strict(flow_of, link_of, inc_class, classes, capacity, present, floor, rate, weight=None, order=None,
            order_share=0.0, alpha=0.0, prices=None):
    used = np.zeros(capacity.size)
    # Classes below c with a flow on the link: each keeps its floor out of what class c may take.
    lower = np.cumsum(present, axis=0) - present
    for c in range(NUM_CLASSES - 1, -1, -1):
        if not present[c].any():
            continue
        members, f, link = _subset(flow_of, link_of, inc_class, classes, c)
        avail = capacity - used - floor * capacity * lower[c]
        r = _share(f, link, members.size, np.maximum(avail, 0.0), None if weight is None else weight[members],
                   None if order is None else order[members], order_share, alpha,
                   None if prices is None else prices[c])
        rate[members] = r
        used += np.bincount(link, weights=r[f], minlength=capacity.size)
    return rate


def _weighted(flow_of, link_of, inc_class, classes, capacity, present, rate, flow_weight=None, order=None,
              order_share=0.0, alpha=0.0, prices=None):
    weight = (2.0 ** np.arange(NUM_CLASSES))[:, None] * present
    total = weight.sum(axis=0)
    total[total == 0] = 1.0
    share = capacity[None, :] * weight / total
    subsets = {c: _subset(flow_of, link_of, inc_class, classes, c) for c in range(NUM_CLASSES) if present[c].any()}
    for _ in range(WEIGHTED_ROUNDS):
        usage = np.zeros_like(share)
        for c, (members, f, link) in subsets.items():
            r = _share(f, link, members.size, share[c], None if flow_weight is None else flow_weight[members],
                       None if order is None else order[members], order_share, alpha,
                       None if prices is None else prices[c])
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
