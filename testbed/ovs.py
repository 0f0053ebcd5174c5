"""Open vSwitch's packet sockets (the send socket widened in place, the receive sockets' backlog); how fresh its
rules' counters are.

The userspace datapath (no kernel module) transmits every packet of every port through a single AF_PACKET socket
of ovs-vswitchd that is bound to no interface. A packet waiting in a port's tc tree is charged to that socket's
send buffer until it leaves the FIFO, so the buffer bounds how many packets the whole fabric can queue; past it
the send fails and Open vSwitch drops the packet without a counter. ``widen_send_buffer`` duplicates the socket
into this process with ``pidfd_getfd`` (Linux 5.6+, root) and raises its buffer with ``SO_SNDBUFFORCE``; the
socket is the same, so ovs-vswitchd sees the new size at once and keeps it until it exits. Each port has its own
receive socket; what waits there is what the datapath has not forwarded yet (``receive_backlog``).
"""
from __future__ import annotations

import ctypes
import os
import socket
import subprocess
from typing import Dict, Optional, Set, Tuple

PID_FILE = "/var/run/openvswitch/ovs-vswitchd.pid"
FRAME_BYTES = 1514              # a full-size Ethernet frame, as a FIFO's backlog counts it
PACKET_TRUESIZE = 4096          # bytes a queued full-size packet charges to its socket (skb and data), rounded up
MIN_SEND_BUFFER = 64 << 20      # asked for at least: far above what 64 hosts' FIFOs hold at 5 Mbit/s (~22 MB)
SYS_PIDFD_GETFD = 438           # the same number on every architecture (added after the syscall tables merged)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
DEFAULT_MAX_REVALIDATOR_S = 0.5  # ovs-vswitchd.conf.db(5), other_config:max-revalidator


def flow_counter_refresh_s() -> Optional[float]:
    """How often Open vSwitch brings its rules' counters up to date: its revalidators' longest wait,
    ``other_config:max-revalidator`` (ovs-vswitchd.conf.db(5): 500 ms unless set). A flow's counter read through
    OpenFlow can be that old whatever the polling interval; ports' counters are current. None: not readable."""
    try:
        r = subprocess.run(["ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", "other_config:max-revalidator"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    value = r.stdout.strip().strip('"')
    try:
        return int(value) / 1000.0 if value else DEFAULT_MAX_REVALIDATOR_S
    except ValueError:
        return None


def vswitchd_pid() -> Optional[int]:
    try:
        with open(PID_FILE) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _packet_sockets() -> Dict[str, Tuple[str, int]]:
    """Every AF_PACKET socket of this network namespace (/proc/net/packet): inode -> (the interface index it is
    bound to, "0" for none; the bytes waiting in its receive queue)."""
    out = {}
    with open("/proc/net/packet") as f:
        next(f)
        for line in f:
            cols = line.split()
            if len(cols) >= 9:
                out[cols[8]] = (cols[4], int(cols[6]))
    return out


def _socket_fds(pid: int) -> Dict[str, str]:
    """inode -> file descriptor of every socket the process holds."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out[target[8:-1]] = fd
    return out


def receive_backlog(pid: Optional[int] = None, inodes: Optional[Set[str]] = None) -> Optional[int]:
    """Bytes (as the kernel charges them: truesize) waiting in ovs-vswitchd's per-port receive sockets, summed over
    its ports: packets that reached a switch and wait for the userspace datapath to forward them. None when it has
    no such socket (the kernel datapath forwards in the kernel) or it cannot be read. ``inodes`` (from
    ``socket_inodes``) spares a frequent caller the walk of the process's file descriptors."""
    if inodes is None:
        pid = pid or vswitchd_pid()
        if pid is None:
            return None
        inodes = socket_inodes(pid)
    try:
        waiting = [rmem for inode, (iface, rmem) in _packet_sockets().items() if iface != "0" and inode in inodes]
    except (OSError, StopIteration, ValueError):
        return None
    return sum(waiting) if waiting else None


def socket_inodes(pid: Optional[int] = None) -> Set[str]:
    """The inodes of every socket ovs-vswitchd holds (empty when it cannot be read)."""
    pid = pid or vswitchd_pid()
    try:
        return set(_socket_fds(pid)) if pid is not None else set()
    except OSError:
        return set()


def send_socket_inode(pid: Optional[int] = None) -> Optional[str]:
    """(fd, inode) of ovs-vswitchd's send socket (its AF_PACKET socket bound to no interface) as ``"fd:inode"``,
    or None while it has not sent a packet yet."""
    pid = pid or vswitchd_pid()
    if pid is None:
        return None
    try:
        mine = _socket_fds(pid)
        unbound = [inode for inode, (iface, _rmem) in _packet_sockets().items() if iface == "0" and inode in mine]
    except (OSError, StopIteration, ValueError):
        return None
    return f"{mine[unbound[0]]}:{unbound[0]}" if unbound else None


def widen_send_buffer(need_bytes: int) -> Dict[str, object]:
    """Raise ovs-vswitchd's send buffer to at least ``need_bytes``. Returns what it holds now (``bytes``, as the
    kernel counts it) and ``ok``; ``error`` says why not when it could not."""
    pid = vswitchd_pid()
    found = send_socket_inode(pid)
    if found is None:
        return {"ok": False, "bytes": None, "needed": need_bytes, "error": "ovs-vswitchd has no send socket"}
    fd = int(found.split(":")[0])
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = dup = -1
    try:
        pidfd = os.pidfd_open(pid)
        dup = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            err = ctypes.get_errno()
            return {"ok": False, "bytes": None, "needed": need_bytes,
                    "error": f"pidfd_getfd: {os.strerror(err)} (needs Linux 5.6+ and root)"}
        sock = socket.socket(fileno=dup)
        try:
            held = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            if held < need_bytes:
                # The kernel doubles the value it is given (for its own bookkeeping); ask for half.
                sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, min((need_bytes + 1) // 2, 2 ** 30))
                held = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        finally:
            sock.detach()
        return {"ok": held >= need_bytes, "bytes": held, "needed": need_bytes}
    except (OSError, AttributeError) as exc:
        return {"ok": False, "bytes": None, "needed": need_bytes, "error": str(exc)}
    finally:
        if dup >= 0:
            os.close(dup)
        if pidfd >= 0:
            os.close(pidfd)
