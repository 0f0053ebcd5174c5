"""Bring the emulated world up and down: Open vSwitch fabric (leaf-spine or fat-tree), Ryu controllers, classes.

``Testbed`` is a context manager used by the runner, the root tests and the benchmarks::

    with Testbed(FabricSpec(...), out_dir, scheduler="ecmp") as tb:
        tb.check_reachability(); tb.pin(flow, 7); tb.hosts["h1"].popen(...)

Order of ``start()`` (each step is recorded in testbed/state.py before the next, so any exit path, even a
SIGKILL of the runner, can be cleaned up):

1. controller processes (``python -m controller.launcher``) on 127.0.0.1, given the layout and jobs in JSON:
   the scheduler (rules, events) and the monitor (counter polling), each with its own OpenFlow connection;
2. Mininet network with OVS switches (userspace datapath unless the openvswitch kernel module is loaded);
3. wait until the controller confirms (barrier) the base rules of every switch;
4. hosts: static ARP, no IPv6 chatter, TSO/GSO off (64 KB super-packets break priority at 10 Mbit/s);
5. the 8-class HTB tree of testbed/qos.py on every switch port (after the switches exist: adding a port to OVS
   resets its root qdisc).

``stop()`` undoes all of it and is safe to call twice or after a partial start.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Dict, List, Optional, Sequence, Union

from controller.framework import ENV as FRAMEWORK_ENV
from core import queues
from core.classes import NUM_CLASSES
from core.config import DEFAULT_POLL_INTERVAL_S, RESYNC_ENV, ControllerConfig
from core.faults import Fault, link_interfaces
from core.fabric import FabricLayout, FabricSpec
from core.model import FlowKey, JobSpec
from testbed.topo import FabricTopo
from core.transport import DEFAULT_PROFILE, TransportProfile
from core.transport import profile as transport_profile
from testbed import ovs, qos, state

LOG = logging.getLogger("flux.testbed")
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTROLLER_NICENESS = {"scheduler": -10, "monitor": 0}
DGRAM_QLEN = 4096
CONTROLLER_LOGS = {"scheduler": "controller.log", "monitor": "monitor.log"}
CONTROLLER_STATS = {"scheduler": "controller_stats.json", "monitor": "monitor_stats.json"}
MAX_RESTARTS = 3            # per controller and run: a controller that keeps dying fails the run
RECONNECT_BACKOFF_MS = 1000
MAX_MISSED_ANSWERS = 3  # consecutive unanswered liveness checks (half a second apart) that fail a run


class TestbedError(RuntimeError):
    """A run could not be set up or did not behave; the message says what and where to look."""


def kernel_datapath_available() -> bool:
    return os.path.isdir("/sys/module/openvswitch")


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def controller_listening(ip: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ip:port (the controller's OpenFlow listener)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _remote_controller_class():
    """Mininet's RemoteController with a listening check that cannot fail on the bytes the controller sends.

    Mininet checks by running ``echo A | telnet -e A IP PORT`` in a shell and decoding the output as UTF-8; the
    OpenFlow HELLO that a listening controller sends back is binary, so that check sometimes raises
    UnicodeDecodeError. A plain TCP connect answers the same question."""
    from mininet.log import warn
    from mininet.node import RemoteController

    class ListeningController(RemoteController):
        def isListening(self, ip, port):
            if controller_listening(ip, port):
                return True
            warn(f"Unable to contact the remote controller at {ip}:{port}\n")
            return False

        def stop(self, *args, **kwargs):
            # RemoteController.stop() does nothing, which leaves the node's own shell running after net.stop().
            self.terminate()

    return ListeningController


class ControlClient:
    """Request/response over the controller's Unix datagram control socket.

    Every request carries an id that its reply echoes: a reply that comes after its request timed out must not
    be taken for the answer to the next request."""

    def __init__(self, server_path: str, name: str):
        self.server_path = server_path
        self.path = os.path.join(state.STATE_DIR, f"cli-{os.getpid()}-{name}.sock")
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self._next_id = 0

    def request(self, payload: dict, timeout: float = 5.0) -> dict:
        self._next_id += 1
        request_id = self._next_id
        self.sock.sendto(json.dumps(dict(payload, id=request_id)).encode(), self.server_path)
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            reply = json.loads(self.sock.recv(65536))  # socket.timeout when the deadline passes
            if reply.get("id") == request_id:
                return reply

    def close(self) -> None:
        self.sock.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


class Testbed:
    __test__ = False  # not a test class, despite the name

    def __init__(self, spec: FabricSpec, out_dir: str, scheduler: str = "ecmp",
                 scheduler_params: Optional[dict] = None, jobs: Sequence[JobSpec] = (),
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S, class_floor: float = queues.DEFAULT_FLOOR,
                 queue_ms: float = queues.DEFAULT_QUEUE_MS, run_id: str = "", datapath: Optional[str] = None,
                 class_mode: str = "strict", restart_controllers: bool = True,
                 transport: Union[str, TransportProfile] = DEFAULT_PROFILE, controller_framework: str = "ryu"):
        spec.validate()
        self.spec = spec
        self.layout = FabricLayout.from_spec(spec)
        self.out_dir = out_dir
        self.scheduler = scheduler
        self.scheduler_params = scheduler_params or {}
        self.jobs = list(jobs)
        self.poll_interval_s = poll_interval_s
        self.class_floor = class_floor
        self.queue_ms = queue_ms
        self.class_mode = class_mode
        self.run_id = run_id or time.strftime("%Y%m%d-%H%M%S")
        self.datapath = datapath or ("kernel" if kernel_datapath_available() else "user")
        self.net = None
        self.ovs_send_buffer: Dict[str, object] = {}
        self.controllers: Dict[str, subprocess.Popen] = {}     # role -> process
        self.of_ports: Dict[str, int] = {}
        self.clients: Dict[str, ControlClient] = {}
        self.state = state.RunState(self.run_id, out_dir)
        tag = f"{os.getpid()}"
        self.events_socket = os.path.join(state.STATE_DIR, f"ev-{tag}.sock")
        self.control_socket = os.path.join(state.STATE_DIR, f"ctl-{tag}.sock")
        self.monitor_socket = os.path.join(state.STATE_DIR, f"mon-{tag}.sock")
        self.timings: Dict[str, float] = {}
        self.hosts: Dict[str, object] = {}
        self._marker_before: Optional[str] = None
        self._missed: Dict[str, int] = {}
        self.restart_controllers = restart_controllers
        self.controller_framework = controller_framework
        self.transport = transport if isinstance(transport, TransportProfile) else transport_profile(transport)
        self.restarts: List[dict] = []   # controllers restarted during the run (restart_controller)

    # ------------------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Testbed":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        os.makedirs(state.STATE_DIR, exist_ok=True)
        self.state.save()
        # Every process started from here on (controllers, Mininet's shells, whatever runs in a host) inherits the
        # run's token, so that none can outlive the run unnoticed (testbed/state.py).
        self._marker_before = os.environ.get(state.MARKER)
        os.environ[state.MARKER] = self.state.token
        for path in (self.events_socket, self.control_socket, self.monitor_socket):
            self.state.add_file(path)
        self._raise_datagram_queue()
        self._start_controllers()
        t0 = time.time()
        self._build_network()
        self.timings["build_s"] = time.time() - t0
        t0 = time.time()
        self.net.start()
        self._fast_reconnect()
        self._wait_ready()
        self.timings["start_s"] = time.time() - t0
        self._configure_hosts()
        self._install_classes()
        self._widen_ovs_send_buffer()

    def stop(self, fast: bool = False) -> None:
        """Tear everything down; safe after a partial start and when called twice.

        ``fast`` (after a signal or a failed start) skips Mininet's orderly stop, which talks to every host's
        shell and can block on one that was cut off mid-command: all processes get their signal at once, bridges
        go in one OVS transaction, and the whole teardown takes a few seconds at most."""
        t0 = time.time()
        if self.net is not None:
            if not fast:
                try:
                    self.net.stop()
                except Exception as exc:  # keep tearing down the rest
                    LOG.warning("mininet stop failed: %s", exc)
                    fast = True
            if fast:
                self._close_mininet_files()
            self.net = None
            self.timings["stop_s"] = time.time() - t0
        for client in self.clients.values():
            client.close()
        self.clients = {}
        # The scheduler writes its final statistics on SIGTERM; all controllers are given the same 5 s together.
        running = [proc for proc in self.controllers.values() if proc.poll() is None]
        state.end_processes([(proc.pid, signal.SIGTERM) for proc in running], grace_s=2.0 if fast else 5.0)
        for proc in running:
            proc.poll()
        self.controllers = {}
        for path in (self.events_socket, self.control_socket, self.monitor_socket):
            if os.path.exists(path):
                os.unlink(path)
        self._restore_sysctl()
        # Whatever the steps above missed (a host shell that survived, a process started in a host, a bridge OVS
        # did not delete) is removed from the record and by the run's token.
        leftover = state.leftovers(self.state.data)
        if leftover:
            if not fast:
                LOG.warning("removing leftovers: %s", ", ".join(leftover))
            state.remove(self.state.data)
        self.state.clear()
        if os.environ.get(state.MARKER) == self.state.token:
            if self._marker_before is None:
                del os.environ[state.MARKER]
            else:
                os.environ[state.MARKER] = self._marker_before

    def _close_mininet_files(self) -> None:
        """Close the pseudo-terminals Mininet holds for its shells (net.stop() would have)."""
        for node in list(self.net.hosts) + list(self.net.switches) + list(self.net.controllers):
            stdin, slave = getattr(node, "stdin", None), getattr(node, "slave", None)
            try:
                if stdin is not None:
                    stdin.close()
                if slave is not None:
                    os.close(slave)
            except OSError:
                pass

    def _raise_sysctl(self, name: str, value: int, why: str) -> None:
        """Raise a machine-wide setting to at least ``value`` for this run; the old value is recorded in the run's
        state, so that stop() (or the clean-up of a run that died) puts it back."""
        path = "/proc/sys/" + name.replace(".", "/")
        try:
            with open(path) as f:
                old = f.read().strip()
            if int(old) < value:
                restore = self.state.data.setdefault("sysctl_restore", {})
                restore.setdefault(path, old)
                self.state.save()
                with open(path, "w") as f:
                    f.write(str(value))
        except OSError as exc:
            LOG.warning("cannot raise %s (%s): %s", name, exc, why)

    def _restore_sysctl(self) -> None:
        """Put back every setting this run raised."""
        restore = self.state.data.pop("sysctl_restore", {})
        for path, old in restore.items():
            state.restore_sysctl(path, old)
        if restore:
            self.state.save()

    def _raise_datagram_queue(self) -> None:
        """Let bursts of worker events queue at the controller instead of being dropped.

        Linux queues at most ``net.unix.max_dgram_qlen`` (default 10) datagrams on a Unix socket, whatever its
        buffer; 16 workers launching buckets together exceed that. The limit is taken when the socket is
        created, so it is raised before the controller starts and restored at stop."""
        self._raise_sysctl("net.unix.max_dgram_qlen", DGRAM_QLEN, "bursts of events may be dropped")

    # ----------------------------------------------------------------------------------------- controller
    def controller_config(self) -> ControllerConfig:
        return ControllerConfig(layout=self.layout, jobs=self.jobs, scheduler=self.scheduler,
                                scheduler_params=self.scheduler_params, poll_interval_s=self.poll_interval_s,
                                out_dir=os.path.abspath(self.out_dir), events_socket=self.events_socket,
                                control_socket=self.control_socket, monitor_socket=self.monitor_socket)

    def _start_controllers(self) -> None:
        cfg_path = os.path.join(self.out_dir, "controller.json")
        with open(cfg_path, "w") as f:
            f.write(self.controller_config().to_json())
        for role in ("scheduler", "monitor"):
            self.of_ports[role] = free_tcp_port()
            self._spawn_controller(role)
        for role in self.controllers:
            self._wait_listening(role, 30.0)
        self.clients = {"scheduler": ControlClient(self.control_socket, "scheduler"),
                        "monitor": ControlClient(self.monitor_socket, "monitor")}
        for client in self.clients.values():
            self.state.add_file(client.path)

    def _spawn_controller(self, role: str, resync: bool = False) -> None:
        """Start one controller process on its OpenFlow port (``resync``: taking over from one that died)."""
        cfg_path = os.path.join(self.out_dir, "controller.json")
        env = dict(os.environ, FLUX_CONTROLLER_CONFIG=os.path.abspath(cfg_path),
                   PYTHONPATH=PROJECT_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env[RESYNC_ENV] = "1" if resync else "0"
        env[FRAMEWORK_ENV] = self.controller_framework
        log = open(os.path.join(self.out_dir, CONTROLLER_LOGS[role]), "a" if resync else "w")
        # Own session: a Ctrl-C in the terminal reaches the runner, which stops the controller in order.
        # The scheduler stands for a controller on its own machine: on a 2-core box it must not queue behind
        # emulated hosts for the CPU, or reaction latency would measure the emulator, not the policy.
        # It also dies with the runner, even one killed with SIGKILL.
        niceness = CONTROLLER_NICENESS[role]
        die_with_runner = state.die_with_parent()

        def preexec(n=niceness, die=die_with_runner):
            die()
            if n:
                os.nice(n)
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.launcher", "--role", role, "--ofp-tcp-listen-port",
             str(self.of_ports[role])],
            cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=preexec)
        log.close()
        self.controllers[role] = proc
        self.state.add_process(proc.pid, f"controller ({role})")

    def _wait_listening(self, role: str, timeout_s: float) -> None:
        proc, log_name = self.controllers[role], os.path.join(self.out_dir, CONTROLLER_LOGS[role])
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if proc.poll() is not None:
                raise TestbedError(f"the {role} controller exited at start (code {proc.returncode}); "
                                   f"see {log_name}:\n{self._log_tail(log_name)}")
            if controller_listening("127.0.0.1", self.of_ports[role], timeout_s=0.5):
                return
            time.sleep(0.05)
        raise TestbedError(f"the {role} controller did not listen on 127.0.0.1:{self.of_ports[role]} "
                           f"within {timeout_s:.0f} s")

    def restart_controller(self, role: str, reason: str, timeout_s: float = 15.0) -> dict:
        """Replace a dead (or hung) controller with a new process that takes over the switches' rules, and wait
        until every switch is back with it. Returns the record of the gap; TestbedError if it cannot be done.

        The switches keep forwarding with their rules meanwhile (secure fail mode); what is lost is the
        scheduler's reactions (and the events sent to it) or the monitor's counter polls in the gap."""
        detected = time.time()
        old = self.controllers[role]
        if old.poll() is None:  # hung, not dead: it is ours (started above), so end it by its pid
            state.end_processes([(old.pid, signal.SIGKILL)], grace_s=2.0)
        old.wait()
        stats = os.path.join(self.out_dir, CONTROLLER_STATS[role])
        n = sum(1 for r in self.restarts if r["role"] == role)
        if os.path.exists(stats):  # what the dead process had counted, kept beside its successor's
            os.replace(stats, stats.replace(".json", f".{n}.json"))
        self._spawn_controller(role, resync=True)
        self._wait_listening(role, timeout_s)
        self._wait_switches(role, time.time() + timeout_s)
        self._missed[role] = 0
        record = {"role": role, "reason": reason, "detected_at": detected, "recovered_at": time.time(),
                  "recovery_s": time.time() - detected}
        self.restarts.append(record)
        LOG.warning("%s: restarted it; back with all switches in %.2f s", reason, record["recovery_s"])
        return record

    def _fast_reconnect(self) -> None:
        """Switches retry a lost controller every second at most (Open vSwitch's default backs off to 8 s), so
        that a restarted controller gets them back within about a second."""
        ours = {f"tcp:127.0.0.1:{port}" for port in self.of_ports.values()}
        out = subprocess.run(["ovs-vsctl", "--timeout=5", "--bare", "--columns=_uuid,target", "list", "Controller"],
                             capture_output=True, text=True).stdout.split()
        uuids = [uuid for uuid, target in zip(out[0::2], out[1::2]) if target in ours]
        cmd = ["ovs-vsctl", "--timeout=10"]
        for uuid in uuids:
            cmd += ["--", "set", "Controller", uuid, f"max_backoff={RECONNECT_BACKOFF_MS}"]
        if uuids:
            subprocess.run(cmd, capture_output=True, text=True)

    @staticmethod
    def _log_tail(path: str, lines: int = 15) -> str:
        try:
            with open(path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _wait_ready(self, timeout: float = 60.0) -> None:
        """Until both controller processes have every switch connected (the scheduler: with its rules confirmed)."""
        deadline = time.time() + timeout
        for role in self.clients:
            self._wait_switches(role, deadline)

    def _wait_switches(self, role: str, deadline: float) -> None:
        """Until one controller reports every switch ready; TestbedError if it dies or the deadline passes."""
        status: dict = {}
        while True:
            proc = self.controllers[role]
            if proc.poll() is not None:
                log = CONTROLLER_LOGS[role]
                raise TestbedError(f"the {role} controller died (code {proc.returncode}); see {log}:\n"
                                   + self._log_tail(os.path.join(self.out_dir, log)))
            if time.time() > deadline:
                raise TestbedError(f"switches not ready for the {role} controller in time: {status}")
            try:
                status = self.request({"op": "status"}, timeout=1.0, role=role)
            except (socket.timeout, OSError):
                time.sleep(0.1)
                continue
            if status.get("ready") == status.get("expected"):
                return
            time.sleep(0.05)

    def request(self, payload: dict, timeout: float = 5.0, role: str = "scheduler") -> dict:
        return self.clients[role].request(payload, timeout)

    def pin(self, flow: FlowKey, priority_class: int, path: Optional[int] = None) -> dict:
        """Give one flow a fixed class (and path) through the controller; returns once the switch confirmed."""
        reply = self.request({"op": "pin", "flow": flow.as_list(), "class": priority_class, "path": path})
        if not reply.get("ok"):
            raise TestbedError(f"pinning {flow} failed: {reply.get('error')}")
        return reply

    def controller_stats(self) -> dict:
        """The scheduler's statistics, with the monitor's polling figures under ``monitor``. A controller that
        does not answer is named under ``errors``: its figures are missing, and the run is not what it claims."""
        out: dict = {}
        for role in ("scheduler", "monitor"):
            try:
                reply = self.request({"op": "stats"}, role=role)
            except (socket.timeout, OSError, KeyError):
                out.setdefault("errors", []).append(f"the {role} controller did not answer for its statistics")
                continue
            if role == "scheduler":
                out.update(reply)
            else:
                out["monitor"] = {k: reply.get(k) for k in ("poll_interval_s", "poll_rounds", "elapsed_s")}
        out["restarts"] = list(self.restarts)
        return out

    def controller_problems(self, timeout_s: float = 0.4) -> List[str]:
        """What is wrong with the controllers now: a process that exited, a loop inside one that died, one that
        lost a switch's OpenFlow connection, or one that has not answered MAX_MISSED_ANSWERS checks in a row (a
        single late answer on a busy machine is not a failure). Empty when both are well.

        With ``restart_controllers`` a controller that exited, hung or lost a loop is first replaced
        (``restart_controller``, at most MAX_RESTARTS times per role): only what cannot be recovered is a
        problem. Lost switches are not restarted away: the switches, not the controller, went missing."""
        problems = []
        for role in list(self.controllers):
            failure = self._controller_failure(role, timeout_s)
            if failure is None:
                continue
            text, restartable = failure
            if restartable and self.restart_controllers:
                if sum(1 for r in self.restarts if r["role"] == role) >= MAX_RESTARTS:
                    problems.append(f"{text}, after {MAX_RESTARTS} restarts")
                    continue
                try:
                    self.restart_controller(role, text)
                    continue
                except TestbedError as exc:
                    problems.append(f"{text}, and restarting it failed: {exc}")
                    continue
            problems.append(text)
        return problems

    def _controller_failure(self, role: str, timeout_s: float):
        """(what is wrong, whether a restart may cure it) for one controller, or None."""
        proc, log = self.controllers[role], CONTROLLER_LOGS[role]
        if proc.poll() is not None:
            return f"the {role} controller exited (code {proc.returncode}); see {log}", True
        try:
            status = self.request({"op": "status"}, timeout=timeout_s, role=role)
        except (socket.timeout, OSError, KeyError, ValueError):
            self._missed[role] = self._missed.get(role, 0) + 1
            if self._missed[role] >= MAX_MISSED_ANSWERS:
                return f"the {role} controller has not answered {self._missed[role]} checks; see {log}", True
            return None
        self._missed[role] = 0
        if status.get("failed_loops"):
            return f"the {role} controller's {', '.join(status['failed_loops'])} stopped; see {log}", True
        if status.get("connected") != status.get("expected"):
            return (f"the {role} controller lost switches ({status.get('connected')} of "
                    f"{status.get('expected')} connected)"), False
        return None

    # ---------------------------------------------------------------------------------------------- faults
    def apply_fault(self, fault: Fault) -> dict:
        """Make a fault happen now: links' interfaces down or up (both ends), or a controller killed. Returns
        what was done, for the run's fault timeline."""
        record = {"fault": fault.text, "at_s": fault.at_s, "applied_at": time.time()}
        if fault.kind == "controller":
            proc = self.controllers[fault.target[0]]
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)  # our own child, by its pid
            record["pid"] = proc.pid
            return record
        names = link_interfaces(fault, self.layout)
        state_word = "up" if fault.action == "up" else "down"
        batch = "".join(f"link set dev {name} {state_word}\n" for name in names)
        r = subprocess.run(["ip", "-batch", "-"], input=batch, capture_output=True, text=True)
        if r.returncode != 0:
            raise TestbedError(f"fault {fault.text!r}: ip link failed: {r.stderr.strip()[-300:]}")
        record["interfaces"] = names
        return record

    # -------------------------------------------------------------------------------------------- network
    def _build_network(self) -> None:
        from mininet.link import Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch

        setLogLevel(os.environ.get("FLUX_MININET_LOG", "warning"))
        topo = FabricTopo(self.spec)
        switch = partial(OVSSwitch, datapath=self.datapath, protocols="OpenFlow13", failMode="secure")
        self.net = Mininet(topo=topo, switch=switch, link=Link, build=False, autoSetMacs=False,
                           controller=None, waitConnected=False)
        controller_class = _remote_controller_class()
        for role, port in self.of_ports.items():
            self.net.addController(role[:3], controller=controller_class, ip="127.0.0.1", port=port)
        # Record names before they exist: a kill in the middle of build() must still be cleanable.
        self.state.add_bridges(list(topo.switches()))
        intfs = []
        for a, b, info in topo.links(withInfo=True):
            for node, port in ((a, info["port1"]), (b, info["port2"])):
                if topo.isSwitch(node):
                    intfs.append(f"{node}-eth{port}")
        self.state.add_interfaces(intfs)
        self.net.build()
        for h in self.net.hosts:
            self.state.add_process(h.pid, f"host {h.name}")
        self.hosts = {h.name: h for h in self.net.hosts}

    def _configure_hosts(self) -> None:
        self.net.staticArp()
        for h in self.net.hosts:
            intf = h.defaultIntf().name
            h.cmd(f"ethtool -K {intf} tso off gso off >/dev/null 2>&1; "
                  "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for cmd in self.transport.host_commands(intf, h.IP()):
                out = h.cmd(cmd + " 2>&1 || echo FAILED")
                if "FAILED" in out:
                    raise TestbedError(f"transport profile {self.transport.name}: {cmd!r} failed in {h.name}: "
                                       f"{out.strip()[-200:]}")

    def port_rates(self) -> Dict[str, float]:
        """Configured rate (Mbit/s) of every switch egress port, by interface name (``<switch>-eth<port>``)."""
        return {f"{name}-eth{port}": rate for name, _dpid, port, rate in self.layout.egress_ports()}

    def _widen_ovs_send_buffer(self) -> None:
        """Give Open vSwitch's send socket room for every packet the class FIFOs can hold.

        The userspace datapath sends every packet of every port through one AF_PACKET socket, and a packet held
        in a class FIFO counts against that socket's send buffer until it leaves. With the default buffer
        (``net.core.wmem_default``, 212992 bytes: about 50-90 full packets) the whole fabric can hold no more
        than that in its queues; past it Open vSwitch drops packets of any class and no counter says so
        (measured on the headline under the lossless profile: 2-3% of segments retransmitted, none dropped by
        tc; a capture showed them lost inside the switch). The socket belongs to ovs-vswitchd and lives as long
        as it does, so its buffer is raised in place (``pidfd_getfd``) rather than by restarting the switch. The
        kernel datapath queues in the kernel and has no such socket."""
        if self.datapath == "kernel":
            return
        limits = [self.transport.queue_limit(rate, self.queue_ms, self._data_flows())
                  for rate in self.port_rates().values()]
        need = NUM_CLASSES * sum(limits) * ovs.PACKET_TRUESIZE
        if self.transport.lossless and self.transport.window_packets:
            # Windows bound what the whole fabric can ever hold, well below the sum of its FIFOs.
            need = min(need, self._data_flows() * (self.transport.window_packets + 2) * ovs.PACKET_TRUESIZE)
        # A buffer is a limit, not memory: ask for plenty so that only a real overflow comes near it.
        need = max(need, ovs.MIN_SEND_BUFFER)
        if ovs.send_socket_inode() is None:
            # Open vSwitch opens it with the first packet it sends: send one.
            first, last = self.net.hosts[0], self.net.hosts[-1]
            first.cmd(f"ping -c1 -W1 {last.IP()} >/dev/null 2>&1")
        self.ovs_send_buffer = ovs.widen_send_buffer(need)
        if not self.ovs_send_buffer.get("ok"):
            LOG.warning("Open vSwitch's send buffer holds %s bytes, the class FIFOs up to %d: %s",
                        self.ovs_send_buffer.get("bytes"), need, self.ovs_send_buffer.get("error"))

    def _data_flows(self) -> int:
        """Every data flow of every job (and the checks' few): what a lossless profile's FIFOs must hold."""
        return sum(j.workers * len(j.model.buckets) for j in self.jobs) + 4

    def _install_classes(self) -> None:
        lines = []
        data_flows = self._data_flows()
        for dev, rate in self.port_rates().items():
            limit = self.transport.queue_limit(rate, self.queue_ms, data_flows)
            for cmd in qos.tree_commands(dev, rate, self.class_floor, self.queue_ms, self.class_mode, limit):
                lines.append(" ".join(cmd[1:]))
        with tempfile.NamedTemporaryFile("w", suffix=".tc", delete=False) as f:
            f.write("\n".join(lines) + "\n")
        try:
            r = subprocess.run(["tc", "-batch", f.name], capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        if r.returncode != 0:
            raise TestbedError(f"installing priority classes failed: {r.stderr.strip()[:500]}")

    # ---------------------------------------------------------------------------------------------- checks
    def check_reachability(self, timeout_s: int = 2) -> List[str]:
        """Ping every ordered host pair (each host pings all others in parallel). Returns the failed pairs."""
        failures = []
        ips = {h.name: h.IP() for h in self.net.hosts}
        for h in self.net.hosts:
            targets = " ".join(ip for name, ip in ips.items() if name != h.name)
            out = h.cmd(f"for ip in {targets}; do (ping -c1 -W{timeout_s} $ip >/dev/null 2>&1 "
                        f"|| echo FAIL $ip) & done; wait")
            failures += [f"{h.name}->{line.split()[1]}" for line in out.splitlines() if line.startswith("FAIL")]
        return failures

    def class_stats(self, dev: str) -> dict:
        out = subprocess.run(["tc", "-s", "class", "show", "dev", dev], capture_output=True, text=True).stdout
        return qos.parse_class_stats(out)

    def host_popen(self, host: str, args: List[str], **kwargs):
        """Start a process in a host's namespace with the project's interpreter and import path."""
        env = dict(os.environ, PYTHONPATH=PROJECT_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.update(kwargs.pop("env", {}))
        # mnexec attaches to the host's namespaces and execs the command, so the process is our child: it dies
        # with the runner, even one killed with SIGKILL (its namespace may already be gone then).
        p = self.hosts[host].popen(args, cwd=PROJECT_DIR, env=env, preexec_fn=state.die_with_parent(), **kwargs)
        self.state.add_process(p.pid, f"{host}: {' '.join(args[:4])}")
        return p

    def bulk_flows(self, flows: Sequence[FlowKey], duration: float, warmup: float, timeline: bool = False,
                   send_args: Optional[Dict[FlowKey, List[str]]] = None,
                   ack_every: Optional[Dict[FlowKey, int]] = None) -> List[dict]:
        """Run one testbed.traffic sender/receiver pair per flow (its exact 5-tuple), all at once; returns each
        receiver's report (goodput after ``warmup``) in the order of ``flows``.

        ``timeline``: the receivers also report when their bytes arrived. ``send_args``: extra arguments of some
        flows' senders (a schedule, a probe, messages; testbed/traffic.py); then (receiver, sender) report pairs
        are returned. ``ack_every``: the receivers of those flows answer the sender's messages of that size."""
        by_ip = {h.ip: h for h in self.layout.hosts}
        py = [sys.executable, "-m", "testbed.traffic"]
        # Receivers clamp their window as the profile's workers do (the same --window-clamp flag).
        clamp = self.transport.worker_args()
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        servers = [self.host_popen(by_ip[f.dst_ip].name, py + ["serve", "--bind", f.dst_ip, "--port",
                                                               str(f.dst_port), "--duration", str(duration),
                                                               "--warmup", str(warmup)]
                                   + (["--timeline"] if timeline else [])
                                   + (["--ack-every", str(ack_every[f])] if (ack_every or {}).get(f) else [])
                                   + clamp, **pipes)
                   for f in flows]
        time.sleep(0.3)  # let the receivers listen
        senders = [self.host_popen(by_ip[f.src_ip].name, py + ["send", "--bind", f.src_ip, "--sport",
                                                               str(f.src_port), "--dst", f.dst_ip, "--port",
                                                               str(f.dst_port), "--duration", str(duration)]
                                   + list((send_args or {}).get(f, [])), **pipes)
                   for f in flows]
        reports = []
        for p in servers:
            out, err = p.communicate(timeout=duration + 40)
            if p.returncode != 0:
                raise TestbedError(f"traffic receiver failed: {err.strip()[-300:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        sent = []
        for p in senders:
            out, err = p.communicate(timeout=45)
            if send_args is not None and p.returncode != 0:
                raise TestbedError(f"traffic sender failed: {err.strip()[-300:]}")
            sent.append(json.loads(out.strip().splitlines()[-1]) if send_args is not None else None)
        return list(zip(reports, sent)) if send_args is not None else reports

    def priority_pair(self, high_class: int = 7, low_class: int = 1, duration: float = 4.0,
                      warmup: float = 1.0) -> dict:
        """Two bulk flows into one host port, in different classes; returns both goodputs and the high share.

        The first two hosts (on the first leaf) send to the third, so the congested port is the egress port
        towards the receiver on its leaf (2 x the host rate offered into 1 x)."""
        hosts = self.layout.hosts
        if len(hosts) < 3:
            raise TestbedError("the priority check needs at least 3 hosts")
        a, b, dst = hosts[0], hosts[1], hosts[2]
        high, low = FlowKey(a.ip, dst.ip, 41001, 5101), FlowKey(b.ip, dst.ip, 41002, 5102)
        self.pin(high, high_class)
        self.pin(low, low_class)
        result = {"port": f"{dst.name} via lf{dst.leaf}", "rate_mbps": self.spec.host_rate_mbps,
                  "duration_s": duration}
        result["high"], result["low"] = self.bulk_flows([high, low], duration, warmup)
        hi, lo = result["high"]["goodput_mbps"], result["low"]["goodput_mbps"]
        result["high_share"] = hi / (hi + lo) if hi + lo > 0 else 0.0
        result["port_utilisation"] = (hi + lo) / self.spec.host_rate_mbps
        return result

    def single_flow(self, duration: float = 4.0, warmup: float = 1.0, cross_leaf: bool = False) -> dict:
        """Goodput of one bulk flow, as a fraction of the configured host link rate."""
        hosts = self.layout.hosts
        src = hosts[0]
        dst = hosts[self.spec.hosts_per_leaf] if cross_leaf and self.spec.leaves > 1 else hosts[1]
        (res,) = self.bulk_flows([FlowKey(src.ip, dst.ip, 41201, 5201)], duration, warmup)
        rate = min(self.spec.host_rate_mbps, self.spec.fabric_rate_mbps) if cross_leaf else self.spec.host_rate_mbps
        res["configured_mbps"] = rate
        res["fraction"] = res["goodput_mbps"] / rate
        return res
