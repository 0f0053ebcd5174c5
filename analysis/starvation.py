"""A flow starved by a higher priority class: reading its timelines (rate samples and TCP probes) and the
twin's rule for how long it stays silent (bench/starvation.py measured it, bench/class_change.py reuses it)."""
from __future__ import annotations

import bisect
import math


class BadInput(Exception):
    pass


def floats(text: str, name: str):
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"{name}: expected numbers separated by commas (got {text!r})")
    if not values or any(v <= 0 for v in values):
        raise BadInput(f"{name}: expected positive numbers (got {text!r})")
    return values


def twin_rule(starved_s: float, rto_s: float) -> tuple:
    """(lag, timeouts) the twin charges a flow starved for ``starved_s`` from backoff 0 (twin/engine.py)."""
    if starved_s < rto_s:
        return 0.0, 0
    k = max(1, math.ceil(math.log2(starved_s / rto_s + 1) - 1e-12))
    return rto_s * (2 ** k - 1) - starved_s, k


def value_at(timeline, t: float) -> float:
    """Bytes received by time t (the last point at or before it)."""
    times = [p[0] for p in timeline]
    i = bisect.bisect_right(times, t) - 1
    return timeline[i][1] if i >= 0 else 0


def burst_bounds(timeline, start: float, end: float):
    """First and last arrival of the high flow between ``start`` and ``end`` (wall times), or None."""
    inside = [(t, b) for t, b in timeline if start <= t <= end]
    if not inside:
        return None
    before = value_at(timeline, start)
    first = next((t for t, b in inside if b > before), None)
    last_value = inside[-1][1]
    last = next(t for t, b in inside if b >= last_value)
    return (first, last) if first is not None else None


def longest_silence(timeline, start: float, end: float) -> float:
    """Longest interval between arrivals within [start, end] (a flow waiting for a timer receives nothing)."""
    times = [start] + [t for t, _ in timeline if start < t < end] + [end]
    return max(b - a for a, b in zip(times, times[1:]))


def probe_at(samples, t: float, key: str):
    """The low socket's ``key`` as last sampled at or before t."""
    value = samples[0][key] if samples else 0
    for s in samples:
        if s["t"] > t:
            break
        value = s[key]
    return value


def rate_between(timeline, a: float, b: float) -> float:
    return (value_at(timeline, b) - value_at(timeline, a)) / max(b - a, 1e-9)


def fluid_end(start: float, nbytes: float, alone: float, floor: float, onset: float, offset: float) -> float:
    """When ``nbytes`` sent from ``start`` end if the flow gets ``alone`` bytes/s outside [onset, offset] and
    ``floor`` inside it (the fluid model's answer, with no cost beyond the bandwidth taken)."""
    segments = [(start, onset, alone), (max(start, onset), offset, floor), (max(start, offset), math.inf, alone)]
    left = nbytes
    for a, b, rate in segments:
        if b <= a or rate <= 0:
            continue
        if left <= (b - a) * rate:
            return a + left / rate
        left -= (b - a) * rate
    return math.inf
