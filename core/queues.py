"""Queue sizing shared by both engines: each class FIFO's length, the classes' guaranteed rates, the MTU.

The emulation builds its tc trees from these (testbed/qos.py); the twin models the same FIFOs (twin/engine.py).
"""
from __future__ import annotations

from typing import List

from core.classes import NUM_CLASSES

DEFAULT_FLOOR = 0.01
DEFAULT_QUEUE_MS = 50.0
MTU_BYTES = 1500


def queue_packets(rate_mbps: float, queue_ms: float = DEFAULT_QUEUE_MS) -> int:
    """Per-class FIFO length: ``queue_ms`` of the link rate in full-size packets, at least 10.

    Kept short on purpose: the kernel's default 1000 packets would be 1.2 s of queueing at 10 Mbit/s and hide
    every scheduling effect behind bufferbloat.
    """
    return max(10, int(rate_mbps * 1e6 * queue_ms / 1e3 / (MTU_BYTES * 8)))


CLASS_MODES = ("strict", "weighted")


def class_rates(rate_mbps: float, floor: float, mode: str) -> List[float]:
    """Guaranteed rate (Mbit/s) of classes 0..7.

    strict: every class gets ``floor`` of the link and the rest goes by priority (HTB prio 7-c);
    weighted: class c gets 2^c / 255 of the link and all classes have the same HTB prio, so spare bandwidth is
    also shared in those proportions: class 7 gets half of a fully loaded link, class 6 a quarter, ..., and no
    class is ever starved."""
    if mode == "strict":
        return [rate_mbps * floor] * NUM_CLASSES
    if mode == "weighted":
        total = 2 ** NUM_CLASSES - 1
        return [rate_mbps * 2 ** c / total for c in range(NUM_CLASSES)]
    raise ValueError(f"class mode {mode!r}; known: {', '.join(CLASS_MODES)}")
