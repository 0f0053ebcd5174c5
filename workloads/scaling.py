"""From the real cluster to the emulated one, keeping every job's ratio of communication to computation.

The real cluster gives each worker a link of ``B_real`` (default 100 Gbit/s); the emulated hosts have links of
``B_emu`` (e.g. 10 Mbit/s), four orders of magnitude slower. Slowing only the network would make every job
communication-bound; slowing everything by the same factor would make a ResNet-50 iteration last hours. Instead:

* every compute duration (forward and backward time of every bucket) is multiplied by one time scale ``tau``
  (emulated seconds per real second);
* every byte count is multiplied by ``beta = tau * B_emu / B_real``.

A transfer of ``S`` bytes then takes ``beta * S / B_emu = tau * S / B_real`` emulated seconds: exactly ``tau`` times
its real duration. Computation also takes ``tau`` times its real duration, so for every job
``comm_emu / comp_emu = comm_real / comp_real``, and any mix of overlap and waiting plays out the same, only
slower by ``tau``. One ``tau`` serves all jobs of a scenario, so their relative speeds are kept as well.

Two effects bend the identity slightly, both small at the shipped sizes:

* bytes are rounded to whole bytes, and a bucket is at least ``MIN_BUCKET_BYTES`` (1 KiB) and at least
  ``MIN_BYTES_PER_WORKER`` (64) bytes per worker, so that every step of the ring moves a non-empty chunk that is
  not dominated by rounding; a bucket raised to that floor communicates a little more than its share;
* a 10 Mbit/s emulated link delivers about 95% of its configured rate as TCP goodput (Ethernet/IP/TCP headers),
  and the real network has overheads of its own: this module scales nominal rates; pass an effective
  ``emu_link_mbps`` to correct for goodput if wanted.

Choosing ``tau`` (``suggest_time_scale``): the emulation wants iterations long against its timing noise (process
wake-ups, controller polling at 0.5 s) and short enough to run many iterations per minute, i.e. in
``target_iteration_s`` = (0.5, 3.0) s by default. Each job's iteration is estimated without overlap as
``compute_s + ring_time_s(gradient bytes, N, B_real)`` (core/ring.py); then

1. ``tau = center_s / geometric mean of the estimates`` (``center_s`` = 1.5 s, inside the default range with room
   on both sides: the typical job lands there);
2. ``tau`` is clipped into ``[lo / shortest, hi / longest]``, the interval in which every job is inside the range
   (narrowed by 1% at each end when it is wide enough, so that byte rounding cannot push a job out);
3. if that interval is empty (the jobs' iterations differ by more than ``hi / lo``), ``tau = sqrt(lo * hi /
   (shortest * longest))``, which puts the shortest job as far below ``lo`` as the longest is above ``hi`` (in
   ratio).

The scaled estimate is ``tau`` times the real one, so the choice does not depend on ``B_emu``; the byte floor, which
does, is left to the 1% margin.

Granularity (``merge_small_buckets``, ``granularity_time_scale``): at these rates a bucket can be a handful of
packets, and a switch cannot order an operation of two packets, however urgent. Every operation should put at
least ``min_packets`` (default 20) full data packets on each ring hop. Buckets are merged first (the smallest
into its smaller neighbour); a job whose whole gradient is still too small raises ``tau`` (under ``auto``) to
the value at which it is not, which lengthens every iteration by the same factor: the wall-time cost of the
budget, reported with the resolved scenario.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence, Tuple, Union

from core.model import Bucket, ModelProfile
from core.ring import packets_per_hop, ring_time_s

MIN_BUCKET_BYTES = 1024
MIN_BYTES_PER_WORKER = 64
DEFAULT_REAL_LINK_GBPS = 100.0
DEFAULT_TARGET_ITERATION_S = (0.5, 3.0)
DEFAULT_CENTER_S = 1.5
CLIP_MARGIN = 0.01


def estimate_iteration_s(profile: ModelProfile, workers: int, rate_bps: float) -> float:
    """An iteration's length with no overlap: all compute, then one all-reduce of all gradients at line rate."""
    return profile.compute_s + ring_time_s(profile.gradient_bytes, workers, rate_bps)


@dataclass(frozen=True)
class Scaling:
    """Real-to-emulated scaling: times x ``time_scale``, bytes x ``byte_factor``."""

    real_link_gbps: float = DEFAULT_REAL_LINK_GBPS
    emu_link_mbps: float = 10.0
    time_scale: float = 1.0

    def __post_init__(self):
        for name in ("real_link_gbps", "emu_link_mbps", "time_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")

    @property
    def real_rate_bps(self) -> float:
        return self.real_link_gbps * 1e9

    @property
    def emu_rate_bps(self) -> float:
        return self.emu_link_mbps * 1e6

    @property
    def byte_factor(self) -> float:
        """beta = tau * B_emu / B_real: emulated bytes per real byte."""
        return self.time_scale * self.emu_rate_bps / self.real_rate_bps

    def scale_seconds(self, seconds: float) -> float:
        return seconds * self.time_scale

    def min_bucket_bytes(self, workers: int = 0) -> int:
        """The smallest emulated bucket for a job of ``workers`` ranks."""
        return max(MIN_BUCKET_BYTES, MIN_BYTES_PER_WORKER * max(workers, 0))

    def scale_bytes(self, nbytes: int, workers: int = 0) -> int:
        return max(self.min_bucket_bytes(workers), int(round(nbytes * self.byte_factor)))

    def scale_profile(self, profile: ModelProfile, workers: int = 0) -> ModelProfile:
        """``profile`` as the emulation runs it: every bucket's times x tau, bytes x beta (with the floor)."""
        buckets = tuple(Bucket(b.index, self.scale_bytes(b.nbytes, workers), self.scale_seconds(b.forward_s),
                               self.scale_seconds(b.backward_s)) for b in profile.buckets)
        return replace(profile, buckets=buckets)

    def to_dict(self) -> dict:
        return {"real_link_gbps": self.real_link_gbps, "emu_link_mbps": self.emu_link_mbps,
                "time_scale": self.time_scale, "byte_factor": self.byte_factor}

    @classmethod
    def from_dict(cls, d: dict) -> "Scaling":
        return cls(real_link_gbps=float(d["real_link_gbps"]), emu_link_mbps=float(d["emu_link_mbps"]),
                   time_scale=float(d["time_scale"]))


def suggest_time_scale(profiles: Sequence[ModelProfile], emu_link_mbps: float = 10.0,
                       real_link_gbps: float = DEFAULT_REAL_LINK_GBPS,
                       target_iteration_s: Tuple[float, float] = DEFAULT_TARGET_ITERATION_S,
                       workers: Union[int, Sequence[int]] = 4, center_s: float = DEFAULT_CENTER_S) -> float:
    """One time scale for all ``profiles`` (real, unscaled) so their emulated iterations fall in the target range.

    ``workers`` is the ring size of every job, or one ring size per profile. The rule is in the module docstring.
    ``emu_link_mbps`` is checked but does not change the result: a scaled iteration is tau x the real one.
    """
    if not profiles:
        raise ValueError("need at least one profile")
    Scaling(real_link_gbps, emu_link_mbps, 1.0)  # validates the rates
    lo, hi = (float(x) for x in target_iteration_s)
    if not 0 < lo <= hi:
        raise ValueError(f"target_iteration_s must be (lo, hi) with 0 < lo <= hi (got {target_iteration_s!r})")
    if not lo <= center_s <= hi:
        raise ValueError(f"center_s must lie in the target range (got {center_s} for {target_iteration_s!r})")
    sizes = [workers] * len(profiles) if isinstance(workers, int) else list(workers)
    if len(sizes) != len(profiles):
        raise ValueError("workers must be an integer or one value per profile")
    rate = real_link_gbps * 1e9
    estimates = [estimate_iteration_s(p, n, rate) for p, n in zip(profiles, sizes)]
    if min(estimates) <= 0:
        raise ValueError("a profile has no compute time and no gradients")
    geo_mean = math.exp(sum(math.log(t) for t in estimates) / len(estimates))
    tau = center_s / geo_mean
    # Clip with a small margin inside the range first: rounding bytes and the byte floor lengthen scaled
    # iterations slightly, and a job exactly on the edge would leave the range.
    for margin in (CLIP_MARGIN, 0.0):
        low_bound = lo * (1 + margin) / min(estimates)
        high_bound = hi * (1 - margin) / max(estimates)
        if low_bound <= high_bound:
            return min(max(tau, low_bound), high_bound)
    return math.sqrt(lo * hi / (min(estimates) * max(estimates)))


# -- granularity: enough packets per operation for a class to matter ---------------------------------------------

DEFAULT_MIN_PACKETS = 20


def merge_small_buckets(profile: ModelProfile, workers: int, scaling: Scaling, min_packets: float) -> ModelProfile:
    """``profile`` (real) with adjacent buckets merged until every bucket, once scaled, puts at least
    ``min_packets`` data packets on a ring hop per operation, or one bucket is left.

    The bucket with the fewest packets goes first, into the smaller of its neighbours; launch order and the sums
    of bytes and times are kept. Merging trades overlap (fewer, later operations) for operations long enough to
    be scheduled: a switch cannot order an operation of two packets."""
    buckets = list(profile.buckets)

    def packets(b: Bucket) -> float:
        return packets_per_hop(scaling.scale_bytes(b.nbytes, workers), workers)

    while len(buckets) > 1:
        i = min(range(len(buckets)), key=lambda k: (packets(buckets[k]), k))
        if packets(buckets[i]) >= min_packets:
            break
        if i == 0:
            j = 1
        elif i == len(buckets) - 1:
            j = i - 1
        else:
            j = i - 1 if buckets[i - 1].nbytes <= buckets[i + 1].nbytes else i + 1
        a, b = sorted((i, j))
        merged = Bucket(a, buckets[a].nbytes + buckets[b].nbytes, buckets[a].forward_s + buckets[b].forward_s,
                        buckets[a].backward_s + buckets[b].backward_s)
        buckets[a:b + 1] = [merged]
    return replace(profile, buckets=tuple(Bucket(k, b.nbytes, b.forward_s, b.backward_s)
                                          for k, b in enumerate(buckets)))


def granularity_time_scale(profiles: Sequence[ModelProfile], workers: Sequence[int], scaling: Scaling,
                           min_packets: float) -> float:
    """The smallest time scale >= ``scaling.time_scale`` at which every job's whole gradient, as one bucket, puts
    ``min_packets`` packets on a ring hop (bytes, hence packets, grow with the time scale). Jobs of one worker
    send nothing and do not count."""
    tau = scaling.time_scale
    for profile, n in zip(profiles, workers):
        if n < 2 or profile.gradient_bytes <= 0:
            continue
        have = packets_per_hop(profile.gradient_bytes * scaling.byte_factor, n)
        if have < min_packets:
            tau = max(tau, scaling.time_scale * min_packets / have)
    return tau
