"""One flow's packets through a running testbed, as the receiver's switch port sends them (root tests)."""
import subprocess
import sys
import time
from typing import List


def flow_dscps(tb, src, dst, flow, duration_s: float = 2.0) -> List[int]:
    """Send ``flow`` from host ``src`` to ``dst`` for ``duration_s`` (testbed/traffic.py) and return the DSCP of
    each of its packets captured at the leaf port that sends them to ``dst``."""
    from scapy.all import IP, TCP, AsyncSniffer, conf

    # Scapy keeps the interfaces it saw when first imported; an earlier fabric in this process had ports of the
    # same names with other indexes.
    conf.ifaces.reload()
    py = [sys.executable, "-m", "testbed.traffic"]
    egress = f"lf{dst.leaf}-eth{dst.leaf_port}"
    sniffer = AsyncSniffer(iface=egress, filter=f"tcp and src port {flow.src_port}", count=20)
    sniffer.start()
    time.sleep(0.5)
    server = tb.host_popen(dst.name, py + ["serve", "--bind", dst.ip, "--port", str(flow.dst_port),
                                           "--duration", str(duration_s)], stdout=subprocess.PIPE)
    time.sleep(0.3)
    sender = tb.host_popen(src.name, py + ["send", "--bind", src.ip, "--sport", str(flow.src_port),
                                           "--dst", dst.ip, "--port", str(flow.dst_port),
                                           "--duration", str(duration_s)], stdout=subprocess.PIPE)
    server.communicate(timeout=30)
    sender.communicate(timeout=30)
    sniffer.join(timeout=5)
    if sniffer.running:
        sniffer.stop()
    return [p[IP].tos >> 2 for p in sniffer.results if IP in p and TCP in p]
