"""Priority classes in the data plane: the DSCP-to-class map and the tc tree on every switch egress port.

Open vSwitch's own queues (QoS linux-htb + set_queue) do not classify on the userspace datapath, so the testbed
splits the work: the controller's ingress rule writes the packet's DSCP, and every switch egress port carries an
HTB tree installed with ``tc`` that picks the class from the DSCP.

DSCP-to-class map (class 7 is served first)::

    class   DSCP   ToS byte   HTB class   HTB prio
      7      56      0xe0       1:17         0
      6      48      0xc0       1:16         1
      5      40      0xa0       1:15         2
      4      32      0x80       1:14         3
      3      24      0x60       1:13         4
      2      16      0x40       1:12         5
      1       8      0x20       1:11         6
      0       0      0x00       1:10         7    (also every unmatched packet)

i.e. DSCP = 8 x class (the class selector code points CS0..CS7). Tree per port::

    root 1: htb (default 1:10)
      1:1  rate = ceil = link rate
        1:1c  rate = floor x link rate, ceil = link rate, prio 7-c, pfifo of ``queue_packets`` packets
    u32 filters on the ToS byte (mask 0xfc) choose 1:1c.

HTB lends spare bandwidth to the lowest ``prio`` first, so the classes are strict priorities above a small
guaranteed floor (default 1% of the link each), which keeps starved TCP flows alive (no RTO spiral) without
hurting the top class much: against one lower class it keeps 99% of the port. Pure functions: the commands are
returned as argument lists and run by testbed/fabric.py.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from core.classes import NUM_CLASSES, tos_byte
from core.queues import DEFAULT_FLOOR, DEFAULT_QUEUE_MS, MTU_BYTES, class_rates, queue_packets

BURST_MS = 2.0


def htb_classid(priority_class: int) -> str:
    return f"1:{10 + priority_class}"


def htb_prio(priority_class: int) -> int:
    return NUM_CLASSES - 1 - priority_class


def _kbit(rate_mbps: float) -> str:
    return f"{max(1, int(round(rate_mbps * 1000)))}kbit"


def tree_commands(dev: str, rate_mbps: float, floor: float = DEFAULT_FLOOR,
                  queue_ms: float = DEFAULT_QUEUE_MS, mode: str = "strict",
                  limit_packets: Optional[int] = None) -> List[List[str]]:
    """The tc commands that install the 8-class tree on ``dev`` (replacing whatever root qdisc is there).
    Each class FIFO holds ``queue_ms`` of the link rate, or ``limit_packets`` when given."""
    if not 0 < floor * NUM_CLASSES < 1:
        raise ValueError(f"class floor {floor} must be > 0 and < {1 / NUM_CLASSES:.3f}")
    rates = class_rates(rate_mbps, floor, mode)
    rate = _kbit(rate_mbps)
    # quantum: one MTU so that equal-prio borrowing is per packet and tc does not warn about r2q at low rates.
    quantum = str(MTU_BYTES + 14)
    # HTB's default burst (rate / HZ) holds a single flow at 100 Mbit/s to 77% of the rate; 2 ms of the link
    # rate lets it reach 95%. Below ~12 Mbit/s the floor of two full packets applies: larger bursts there
    # (5 ms) slowed a 10 Mbit/s ring all-reduce by a quarter (bench/fabric.py measures both).
    burst = str(max(2 * MTU_BYTES, int(rate_mbps * 1e6 / 8 * BURST_MS / 1e3)))
    if not rate_mbps * 1e6 * queue_ms / 1e3 >= MTU_BYTES * 8:
        raise ValueError(f"--queue-ms {queue_ms:g} is shorter than one {MTU_BYTES}-byte packet at {rate_mbps:g} "
                         f"Mbit/s ({MTU_BYTES * 8 / (rate_mbps * 1e3):.2f} ms)")
    limit = str(limit_packets if limit_packets is not None else queue_packets(rate_mbps, queue_ms))
    cmds = [
        ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10"],
        ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
         "rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", quantum],
    ]
    for c in range(NUM_CLASSES):
        prio = htb_prio(c) if mode == "strict" else 0
        cmds.append(["tc", "class", "replace", "dev", dev, "parent", "1:1", "classid", htb_classid(c), "htb",
                     "rate", _kbit(rates[c]), "ceil", rate, "burst", burst, "cburst", burst,
                     "prio", str(prio), "quantum", quantum])
        cmds.append(["tc", "qdisc", "replace", "dev", dev, "parent", htb_classid(c), "handle", f"{100 + c}:",
                     "pfifo", "limit", limit])
    for c in range(1, NUM_CLASSES):
        cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                     "match", "ip", "tos", hex(tos_byte(c)), "0xfc", "flowid", htb_classid(c)])
    return cmds


def parse_class_stats(tc_output: str) -> dict:
    """Bytes and packets sent per class from ``tc -s class show dev X`` output: {class: (bytes, packets)}."""
    stats = {}
    current = None
    for line in tc_output.splitlines():
        line = line.strip()
        if line.startswith("class htb"):
            current = None
            parts = line.split()
            classid = parts[2]
            for c in range(NUM_CLASSES):
                if classid == htb_classid(c):
                    current = c
        elif line.startswith("Sent") and current is not None:
            parts = line.split()
            stats[current] = (int(parts[1]), int(parts[3]))
            current = None
    return stats


def parse_qdisc_stats(tc_output: str) -> Dict[Tuple[str, int], Tuple[int, int, int]]:
    """Per (device, class): (bytes sent, packets dropped, bytes queued now) of each class's FIFO, from
    ``tc -s qdisc show`` (all devices at once). Only the classes' leaf FIFOs count: that is where a class's
    packets wait and where they are dropped."""
    out: Dict[Tuple[str, int], Tuple[int, int, int]] = {}
    key = None
    sent = dropped = 0
    for line in tc_output.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "qdisc":
            key = None
            if "dev" in parts and "parent" in parts:
                dev, parent = parts[parts.index("dev") + 1], parts[parts.index("parent") + 1]
                for c in range(NUM_CLASSES):
                    if parent == htb_classid(c):
                        key = (dev, c)
        elif key is not None and parts[0] == "Sent":
            sent = int(parts[1])
            dropped = int(parts[6].rstrip(","))  # "Sent B bytes P pkt (dropped D, overlimits ..."
        elif key is not None and parts[0] == "backlog":
            out[key] = (sent, dropped, _bytes(parts[1]))
            key = None
    return out


def _bytes(text: str) -> int:
    """tc's byte counts: 1514b, 12Kb, 1Mb (powers of 1024 in tc's output)."""
    units = {"b": 1, "Kb": 1024, "Mb": 1024 ** 2, "Gb": 1024 ** 3}
    for unit in ("Kb", "Mb", "Gb", "b"):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * units[unit])
    return int(text)
