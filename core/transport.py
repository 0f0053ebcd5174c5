"""Transport profiles: how the emulated hosts' TCP and the switches' class FIFOs stand in for a fabric's transport.

Real AI fabrics mostly carry RDMA over Converged Ethernet with priority flow control: a switch never drops, a
flow paused behind a busier class resumes as soon as it may send, and a sender has a bounded amount of data
outstanding. The emulation carries TCP through tc FIFOs. A profile says which of those properties it keeps:

* ``tcp``: the kernel's TCP as it is (reordering threshold 3, 200 ms minimum RTO) and class FIFOs of
  ``--queue-ms`` of the link rate, which drop when full. Starved flows lose packets, time out and back off.
* ``lossless``: a RoCE/PFC-like fabric built from what these kernels offer:
    - bounded data in flight: every worker clamps the receive window of its incoming ring connections to
      ``window_packets`` full packets (``TCP_WINDOW_CLAMP`` on the listening socket, ``--window-clamp``), as an
      RDMA sender's outstanding work bounds what it has on the wire; 8 packets are about twice the
      bandwidth-delay product of a 3-hop path at any emulated rate (the per-hop packet time and the rate scale
      together). The clamp alone does not hold on recent kernels (receive-buffer autotuning and the first
      full-sized packet reset it: on 6.18 senders saw 65,535-byte windows), so receivers also lock their
      receive buffer and set the clamp again as data arrives (workloads/allreduce.py, ``clamp_listener``,
      ``hold_clamp``). Routes cannot do it: the route's ``window`` did not reach accepted connections (a receiver
      advertised 53 KB under an 11.6 KB route window), and a locked route ``cwnd`` is only applied from the
      kernel's TCP metrics cache, which has no entry for a first connection (measured: cwnd 22 under
      ``cwnd lock 8``);
    - no drops: every class FIFO holds the windows of all the run's data flows and their ACKs, so no queue can
      overflow whatever the scheduler does (the switch half of PFC);
    - starvation costs delay, not timeouts: the minimum retransmission timeout is raised to ``rto_min_ms`` on
      every host route, so that a flow waiting behind higher classes is not taken for lost (the host half of
      PFC's pause);
    - reordering is not loss: ``net.ipv4.tcp_reordering`` is raised per host namespace, so that packets
      reordered by a live class change do not trigger fast retransmits.

Both profiles name their congestion control and put it on every host's route: a namespace inherits the
machine's default (``bbr`` on some hosts, ``cubic`` on most), and results must not depend on the machine.

Each setting's measured effect is in docs/fidelity.md (bench/fidelity.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional

from core.queues import queue_packets

TCP_PAYLOAD = 1448      # bytes of data in a full packet (1500-byte MTU, TCP timestamps)
ACK_ALLOWANCE = 2       # ACKs that may wait in a class FIFO per data flow (delayed ACKs: one per two packets)


@dataclass(frozen=True)
class TransportProfile:
    name: str
    congestion_control: str = "cubic"      # on every host route (the namespace default is the machine's)
    window_packets: Optional[int] = None   # receive window clamp per ring connection, in full packets
    rto_min_ms: Optional[int] = None       # minimum retransmission timeout on every route (None: 200 ms)
    reordering: Optional[int] = None       # net.ipv4.tcp_reordering (None: the kernel's 3)
    lossless: bool = False                 # class FIFOs sized so that none can overflow

    def host_commands(self, intf: str, ip: str, prefix: str = "10.0.0.0/8") -> List[str]:
        """Shell commands for one host namespace (run after its interface is up)."""
        cmds = []
        if self.reordering is not None:
            cmds.append(f"sysctl -qw net.ipv4.tcp_reordering={self.reordering}")
        # The route's congestion control, not the namespace's sysctl: a namespace may only choose among
        # net.ipv4.tcp_allowed_congestion_control, a machine-wide list (``reno bbr`` on some hosts).
        options = [f"congctl {self.congestion_control}"]
        if self.rto_min_ms is not None:
            options.append(f"rto_min {self.rto_min_ms}ms")
        cmds.append(f"ip route replace {prefix} dev {intf} proto kernel scope link src {ip} {' '.join(options)}")
        return cmds

    def worker_args(self) -> List[str]:
        """Arguments of workloads.worker for this profile."""
        if self.window_packets is None:
            return []
        return ["--window-clamp", str(self.window_packets * TCP_PAYLOAD)]

    def queue_limit(self, rate_mbps: float, queue_ms: float, data_flows: int) -> int:
        """Packets each class FIFO of a port holds."""
        if not self.lossless:
            return queue_packets(rate_mbps, queue_ms)
        # Every data flow's window and its ACKs at once: more than any port can ever be offered.
        return max(queue_packets(rate_mbps, queue_ms), data_flows * ((self.window_packets or 0) + ACK_ALLOWANCE))

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, object]]) -> "TransportProfile":
        """A profile as a run's config records it (None or {}: the default profile, as before profiles were
        recorded)."""
        if not d:
            return PROFILES[DEFAULT_PROFILE]
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


PROFILES: Dict[str, TransportProfile] = {
    "tcp": TransportProfile("tcp"),
    "lossless": TransportProfile("lossless", window_packets=8, rto_min_ms=5000, reordering=127, lossless=True),
}
DEFAULT_PROFILE = "tcp"


CONGESTION_CONTROLS = ("cubic", "reno", "bbr")


def profile(name: str, congestion_control: Optional[str] = None) -> TransportProfile:
    """A profile by name, with its congestion control replaced if one is given."""
    try:
        found = PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown transport profile {name!r}; known: {', '.join(PROFILES)}") from None
    if congestion_control is None:
        return found
    if congestion_control not in CONGESTION_CONTROLS:
        raise ValueError(f"unknown congestion control {congestion_control!r}; known: {', '.join(CONGESTION_CONTROLS)}")
    return replace(found, congestion_control=congestion_control)


def available_congestion_controls() -> List[str]:
    """What this kernel offers (empty when it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []
