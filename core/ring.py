"""The traffic of a ring all-reduce, written once.

With N workers, an all-reduce of S bytes is N-1 reduce-scatter and N-1 all-gather steps of S/N bytes each: every
rank sends 2(N-1)/N x S bytes to the next rank of the ring, in 2(N-1) dependent steps.
"""
from __future__ import annotations


def ring_steps(workers: int) -> int:
    """Dependent send steps of one all-reduce (each waits for the previous step's data)."""
    return 2 * (workers - 1) if workers > 1 else 0


def ring_bytes_per_rank(nbytes: float, workers: int) -> float:
    """Bytes one rank sends in one all-reduce of ``nbytes``: 2(N-1)/N x S (0 for a single worker)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1 (got {workers})")
    return 2.0 * (workers - 1) / workers * nbytes if workers > 1 else 0.0


def ring_time_s(nbytes: float, workers: int, rate_bps: float) -> float:
    """Lower bound on an all-reduce of ``nbytes`` over links of ``rate_bps`` bits/s: every rank's bytes at line
    rate, no headers."""
    if rate_bps <= 0:
        raise ValueError(f"rate must be > 0 (got {rate_bps})")
    return ring_bytes_per_rank(nbytes, workers) * 8.0 / rate_bps


# TCP payload of one full-size packet at a 1500-byte MTU (IPv4 and TCP headers with the timestamp option).
DATA_PACKET_PAYLOAD = 1448


def packets_per_hop(nbytes: float, workers: int) -> float:
    """Full-size data packets one rank puts on its ring hop in one all-reduce of ``nbytes``: the granularity at
    which a switch can order an operation (a few packets leave little for a priority to act on)."""
    return ring_bytes_per_rank(nbytes, workers) / DATA_PACKET_PAYLOAD
