"""Priority compression: map any number of scored keys (jobs, operations) onto a few strict-priority classes.

A switch port has ``levels`` classes (8 here; the highest is served first). A scheduler scores its keys
(Crux: job priority P_j, Flux: operation score S_o) and this module turns scores into classes. Compression is
monotone: a higher score never gets a lower class, equal scores share a class, and the highest score always gets
the top class ``levels - 1``. Scores are compared on a log scale, because they are ratios (intensities,
urgencies) and what matters is by what factor two keys differ, not by how much.

Let the distinct scores, ascending, be v_1 < ... < v_m with x_i = ln v_i, and n_i keys sharing v_i.

* m <= levels: every distinct score gets its own class. The free classes are used as gaps, placed so that
  classes follow log-score: with targets t_i = (L-1) (x_i - x_1) / (x_m - x_1), choose integers
  c_1 < ... < c_m in 0..L-1 (c_m = L-1) minimising sum_i (c_i - t_i)^2 (dynamic programming). Keys of very
  different score end up far apart, so a key that later scores in between can take a free class without
  moving the others (fewer rule rewrites). Under strict priority the gaps themselves change nothing.

* m > levels: the sorted scores are cut into exactly L contiguous groups (contiguity keeps the order). Two keys
  in one class share its bandwidth instead of the higher one going first; that costs the more, the more their
  scores differ, and costs nothing if they never meet on a link. The cut minimises

      cost = sum over classes c  sum over contending pairs (a, b) both in c  (ln s_a - ln s_b)^2,

  i.e. the within-class spread of log-score counted only between keys that contend (share a link). Ties in that
  cost (e.g. no contention at all) are broken by the same sum over all pairs, so the grouping is then plain
  one-dimensional clustering of log-scores. The segment costs are built incrementally in O(m^2) and the optimal
  cut is found by dynamic programming in O(L m^2).

``contention`` is an iterable of key pairs that share a link; None means every pair contends.
"""
from __future__ import annotations

import math
import random
from typing import Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar

from core.classes import NUM_CLASSES
from core.model import Decision, FlowKey

K = TypeVar("K", bound=Hashable)

#: Scores at or below this are treated as equal to it (the log scale needs positive scores).
SCORE_FLOOR = 1e-300
#: Relative tolerance when comparing costs, so that rounding noise does not override the tie-break.
_REL_TOL = 1e-9


def compress(scores: Mapping[K, float], levels: int = NUM_CLASSES,
             contention: Optional[Iterable[Tuple[K, K]]] = None) -> Dict[K, int]:
    """Class 0..levels-1 of every key; the highest score gets ``levels - 1``. See the module docstring."""
    logs = {}
    for key, s in scores.items():
        if s != s:  # NaN would make the order meaningless
            raise ValueError(f"score of {key!r} is NaN")
        logs[key] = math.log(max(float(s), SCORE_FLOOR))
    return compress_log(logs, levels, contention)


def compress_log(log_scores: Mapping[K, float], levels: int = NUM_CLASSES,
                 contention: Optional[Iterable[Tuple[K, K]]] = None) -> Dict[K, int]:
    """Same as ``compress`` for scores already given as natural logarithms (no underflow for tiny scores)."""
    if levels < 1:
        raise ValueError("levels must be >= 1")
    if not log_scores:
        return {}
    for key, x in log_scores.items():
        if x != x:
            raise ValueError(f"log-score of {key!r} is NaN")
    values = sorted(set(log_scores.values()))
    index = {v: i for i, v in enumerate(values)}
    if len(values) <= levels:
        group_class = _spread(values, levels)
    else:
        sizes = [0] * len(values)
        for x in log_scores.values():
            sizes[index[x]] += 1
        weights = _contention_weights(log_scores, index, sizes, contention)
        group_class = _cut(values, sizes, weights, levels)
    return {key: group_class[index[x]] for key, x in log_scores.items()}


def _spread(x: Sequence[float], levels: int) -> List[int]:
    """Distinct, increasing classes for m <= levels values, spaced to follow the values (top = levels-1)."""
    m = len(x)
    top = levels - 1
    if m == 1:
        return [top]
    if math.isinf(x[0]) or math.isinf(x[-1]):
        span = 0.0
    else:
        span = x[-1] - x[0]
    targets = [top * (v - x[0]) / span if span > 0 and not math.isinf(v) else float(i * top) / (m - 1)
               for i, v in enumerate(x)]
    # best[i][c]: least squared error placing values 0..i with value i in class c.
    inf = math.inf
    best = [[inf] * levels for _ in range(m)]
    prev = [[-1] * levels for _ in range(m)]
    for c in range(levels - m + 1):
        best[0][c] = (c - targets[0]) ** 2
    for i in range(1, m):
        running, arg = inf, -1
        # Value i may sit in class c only if the values above it still fit into the classes above c.
        for c in range(i, levels - (m - 1 - i)):
            if best[i - 1][c - 1] < running:
                running, arg = best[i - 1][c - 1], c - 1
            if arg >= 0:
                best[i][c] = running + (c - targets[i]) ** 2
                prev[i][c] = arg
    classes = [0] * m
    c = top  # the highest score always gets the top class
    for i in range(m - 1, -1, -1):
        classes[i] = c
        c = prev[i][c]
    return classes


def _contention_weights(log_scores, index, sizes, contention) -> Optional[Dict[Tuple[int, int], int]]:
    """Number of contending key pairs between value groups (i < k); None when every pair contends."""
    if contention is None:
        return None
    weights: Dict[Tuple[int, int], int] = {}
    seen = set()
    for a, b in contention:
        if a == b or a not in log_scores or b not in log_scores:
            continue
        pair = frozenset((a, b))
        if pair in seen:
            continue
        seen.add(pair)
        i, k = sorted((index[log_scores[a]], index[log_scores[b]]))
        if i != k:  # pairs with equal scores cost nothing wherever they go
            weights[(i, k)] = weights.get((i, k), 0) + 1
    return weights


def _cut(x: Sequence[float], sizes: Sequence[int], weights, levels: int) -> List[int]:
    """Optimal cut of m > levels sorted values into ``levels`` contiguous classes (see module docstring)."""
    m = len(x)
    # Infinite log-scores (a score of exactly 0 or inf) would make every cost infinite: clamp them to the
    # finite range widened by a margin, which keeps them extreme without poisoning the arithmetic.
    finite = [v for v in x if not math.isinf(v)] or [0.0]
    lo, hi = min(finite), max(finite)
    margin = max(hi - lo, 1.0)
    x = [min(max(v, lo - margin), hi + margin) for v in x]
    # seg[a][b] = (contending cost, total cost) of putting values a..b in one class.
    seg = [[(0.0, 0.0)] * m for _ in range(m)]
    for b in range(1, m):
        cont = tot = 0.0
        for a in range(b - 1, -1, -1):
            d2 = (x[b] - x[a]) ** 2
            pairs = sizes[a] * sizes[b]
            tot += pairs * d2
            cont += (pairs if weights is None else weights.get((a, b), 0)) * d2
            pc, pt = seg[a][b - 1]
            seg[a][b] = (pc + cont, pt + tot)
    # cost[k][b]: best cost of putting values 0..b into k+1 classes; start[k][b]: first value of the last class.
    none = (math.inf, math.inf)
    cost = [[none] * m for _ in range(levels)]
    start = [[0] * m for _ in range(levels)]
    for b in range(m - levels + 1):
        cost[0][b] = seg[0][b]
    for k in range(1, levels):
        for b in range(k, m - (levels - 1 - k)):
            best, arg = none, k
            for a in range(k, b + 1):
                pc, pt = cost[k - 1][a - 1]
                sc, st = seg[a][b]
                cand = (pc + sc, pt + st)
                if _better(cand, best):
                    best, arg = cand, a
            cost[k][b], start[k][b] = best, arg
    classes = [0] * m
    b = m - 1
    for k in range(levels - 1, -1, -1):
        a = start[k][b] if k > 0 else 0
        for i in range(a, b + 1):
            classes[i] = k
        b = a - 1
    return classes


def _better(c1: Tuple[float, float], c2: Tuple[float, float]) -> bool:
    """Lexicographic comparison of (contending, total) costs with a tolerance on the first term."""
    if math.isinf(c2[0]):
        return not math.isinf(c1[0])
    tol = _REL_TOL * max(abs(c1[0]), abs(c2[0]), 1e-12)
    if c1[0] < c2[0] - tol:
        return True
    if c1[0] > c2[0] + tol:
        return False
    return c1[1] < c2[1] - _REL_TOL * max(abs(c1[1]), abs(c2[1]), 1e-12)


def count_changes(previous: Mapping[FlowKey, Decision], current: Mapping[FlowKey, Decision]) -> int:
    """Flow decisions that differ between two ``decide`` results (a missing flow means the default rule).

    This is the number of ingress rules the controller rewrites, so schedulers add it to ``changes``.
    """
    default = Decision()
    flows = set(previous) | set(current)
    return sum(1 for f in flows if previous.get(f, default) != current.get(f, default))


# -- Crux's compression, as published: unique priorities, a maximum K-cut of the contention DAG ------------------

def compress_kcut(scores: Mapping[K, float], contention: Iterable[Tuple[K, K]], levels: int = NUM_CLASSES,
                  orders: int = 32, seed: int = 0) -> Dict[K, int]:
    """Classes as Crux publishes them: every key gets a unique priority (score, then the key itself, breaks
    ties). With no more keys than levels each keeps a class of its own, in that order. Otherwise contending
    keys form a DAG from higher to lower priority, and the keys are cut into ``levels`` levels
    along a topological order of that DAG so that the weight of contending pairs put on different levels is
    largest (a maximum K-cut). Keys that never meet may be reordered freely; ``orders`` random topological
    orders (seeded, plus the one by priority) are searched and the best cut kept (the first found on ties).

    A pair's weight is 1 + |ln s_a - ln s_b|: every separated pair counts, and pairs whose scores differ more
    count more (sharing a class costs the more important key more). Among contending keys a higher priority
    never gets a lower class; keys that meet no one land wherever the order puts them (it cannot matter)."""
    keys = sorted(scores, key=lambda k: (-float(scores[k]), repr(k)))
    rank = {k: i for i, k in enumerate(keys)}
    if len(keys) <= levels:
        # Enough classes for a unique priority each: the order itself, spread over the classes by log-score as
        # ``compress`` does, ties broken (by the key) into neighbouring classes.
        return _unique_classes(keys, scores, levels)
    logs = {k: math.log(max(float(scores[k]), SCORE_FLOOR)) for k in keys}
    edges: Dict[K, List[K]] = {k: [] for k in keys}          # higher priority -> lower priority
    weight: Dict[Tuple[K, K], float] = {}
    for a, b in contention:
        if a == b or a not in rank or b not in rank:
            continue
        hi, lo = (a, b) if rank[a] < rank[b] else (b, a)
        if (hi, lo) not in weight:
            edges[hi].append(lo)
            weight[(hi, lo)] = 1.0 + abs(logs[hi] - logs[lo])
    if not keys:
        return {}
    rng = random.Random(seed)
    best: Optional[Tuple[float, List[K], List[int]]] = None
    for attempt in range(max(orders, 1)):
        order = _topological_order(keys, edges, rank, rng if attempt else None)
        value, cut = _best_contiguous_cut(order, weight, levels)
        if best is None or value > best[0] + _REL_TOL * max(1.0, abs(best[0])):
            best = (value, order, cut)
    _, order, segment = best
    # Segment 0 holds the highest priorities: it gets the top class.
    return {k: levels - 1 - s for k, s in zip(order, segment)}


def _topological_order(keys: Sequence[K], edges: Mapping[K, List[K]], rank: Mapping[K, int],
                       rng: Optional[random.Random]) -> List[K]:
    """Kahn's algorithm; among the keys free to go next, the highest priority (``rng`` None) or a random one."""
    indegree = {k: 0 for k in keys}
    for a in keys:
        for b in edges[a]:
            indegree[b] += 1
    free = [k for k in keys if indegree[k] == 0]
    order = []
    while free:
        free.sort(key=lambda k: rank[k])
        k = free.pop(rng.randrange(len(free)) if rng is not None else 0)
        order.append(k)
        for b in edges[k]:
            indegree[b] -= 1
            if indegree[b] == 0:
                free.append(b)
    return order


def _best_contiguous_cut(order: Sequence[K], weight: Mapping[Tuple[K, K], float],
                         levels: int) -> Tuple[float, List[int]]:
    """Cut ``order`` into at most ``levels`` contiguous segments maximising the weight of the pairs split
    (dynamic programming over segment ends; O(levels n^2))."""
    n = len(order)
    pos = {k: i for i, k in enumerate(order)}
    # inside[i][j]: weight of the pairs with both ends in order[i:j].
    pairs = [(min(pos[a], pos[b]), max(pos[a], pos[b]), w) for (a, b), w in weight.items()]
    total = sum(w for _, _, w in pairs)
    inside = [[0.0] * (n + 1) for _ in range(n + 1)]
    ending: Dict[int, List[Tuple[int, float]]] = {}
    for p, q, w in pairs:
        ending.setdefault(q, []).append((p, w))
    for i in range(n):
        acc = 0.0
        for j in range(i + 1, n + 1):
            acc += sum(w for p, w in ending.get(j - 1, ()) if p >= i)
            inside[i][j] = acc
    # kept[s][j]: least weight kept inside segments when order[:j] is cut into s segments.
    inf = float("inf")
    kept = [[inf] * (n + 1) for _ in range(levels + 1)]
    back = [[0] * (n + 1) for _ in range(levels + 1)]
    kept[0][0] = 0.0
    for s in range(1, levels + 1):
        for j in range(1, n + 1):
            for i in range(s - 1, j):
                if kept[s - 1][i] < inf and kept[s - 1][i] + inside[i][j] < kept[s][j] - 1e-12:
                    kept[s][j], back[s][j] = kept[s - 1][i] + inside[i][j], i
    s_best = min(range(1, min(levels, n) + 1), key=lambda s: (kept[s][n], s))
    segment = [0] * n
    j, s = n, s_best
    while s > 0:
        i = back[s][j]
        for k in range(i, j):
            segment[k] = s - 1
        j, s = i, s - 1
    return total - kept[s_best][n], segment


def _unique_classes(keys: Sequence[K], scores: Mapping[K, float], levels: int) -> Dict[K, int]:
    """Distinct classes for ``keys`` (sorted by decreasing priority, at most ``levels`` of them): ``compress``'s
    log-score spread, then any keys left sharing a class (equal scores) pushed apart in their order."""
    base = compress(scores, levels)
    classes: Dict[K, int] = {}
    below = levels
    for k in keys:  # highest priority first: each takes its spread class, or the next free one under its senior
        c = min(base[k], below - 1)
        classes[k] = c
        below = c
    if min(classes.values()) < 0:  # too little room under equal seniors: plain ranks from the top
        classes = {k: levels - 1 - i for i, k in enumerate(keys)}
    return classes
