"""Faults an experiment schedules: links and switches going down and up, and controllers being killed.

A fault is written as one line, the same in a scenario's ``faults:`` list and in the runner's ``--fault`` flag::

    link lf1-sp1 down at 5        # the link between two switches (either order), both of its ends
    link lf1-sp1 up at 12
    switch sp2 down at 8          # every link of the switch (hosts on a leaf lose theirs too)
    switch sp2 up at 15
    controller scheduler kill at 10   # SIGKILL to a controller process (scheduler or monitor)

``at`` is in seconds from the start of the workload (iteration 0 of jobs without a start offset). ``parse_fault``
checks the grammar; ``check_targets`` checks the names against a fabric. Both raise ValueError with a message fit
for one line on a terminal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Tuple

from core.fabric import FabricLayout, leaf_name

CONTROLLER_ROLES = ("scheduler", "monitor")
_LINE = re.compile(r"^\s*(?P<kind>link|switch|controller)\s+(?P<target>\S+)\s+(?P<action>down|up|kill)\s+"
                   r"at\s+(?P<at>\S+)\s*$")
SYNTAX = "'link A-B down|up at S', 'switch NAME down|up at S' or 'controller scheduler|monitor kill at S'"


@dataclass(frozen=True, order=True)
class Fault:
    at_s: float
    kind: str                  # "link", "switch" or "controller"
    target: Tuple[str, ...]    # (switch, switch), (switch,) or (role,)
    action: str                # "down", "up" or "kill"

    @property
    def text(self) -> str:
        return f"{self.kind} {'-'.join(self.target)} {self.action} at {self.at_s:g}"


def parse_fault(text: str) -> Fault:
    m = _LINE.match(str(text))
    if not m:
        raise ValueError(f"fault {text!r}: expected {SYNTAX}")
    kind, target, action = m.group("kind"), m.group("target"), m.group("action")
    try:
        at = float(m.group("at"))
    except ValueError:
        raise ValueError(f"fault {text!r}: 'at' needs a number of seconds (got {m.group('at')!r})") from None
    if not 0 <= at < 1e6:
        raise ValueError(f"fault {text!r}: 'at' must be >= 0 s (got {at:g})")
    if kind == "controller":
        if action != "kill" or target not in CONTROLLER_ROLES:
            raise ValueError(f"fault {text!r}: a controller fault is 'controller scheduler|monitor kill at S'")
        return Fault(at, kind, (target,), action)
    if action == "kill":
        raise ValueError(f"fault {text!r}: a {kind} goes 'down' or 'up'")
    if kind == "link":
        ends = tuple(target.split("-"))
        if len(ends) != 2 or not all(ends):
            raise ValueError(f"fault {text!r}: a link is named by its two switches, e.g. lf1-sp1")
        return Fault(at, kind, ends, action)
    return Fault(at, kind, (target,), action)


def parse_faults(lines: Iterable[str]) -> List[Fault]:
    """Faults in the order they happen (ties keep their written order)."""
    faults = [parse_fault(line) for line in lines]
    return sorted(faults, key=lambda f: f.at_s)


def check_targets(faults: Iterable[Fault], layout: FabricLayout) -> None:
    """Every link and switch named must exist in the fabric."""
    switches = {s.name for s in layout.switches}
    for fault in faults:
        if fault.kind == "link":
            try:
                layout.link_between(*fault.target)
            except KeyError:
                raise ValueError(f"fault {fault.text!r}: no link between {fault.target[0]} and {fault.target[1]} "
                                 f"in this fabric") from None
        elif fault.kind == "switch" and fault.target[0] not in switches:
            raise ValueError(f"fault {fault.text!r}: no switch {fault.target[0]} in this fabric "
                             f"({', '.join(sorted(switches))})")


def link_interfaces(fault: Fault, layout: FabricLayout) -> List[str]:
    """The switch-port interfaces a link or switch fault takes down or up (both ends of every link concerned)."""
    if fault.kind == "link":
        links = [layout.link_between(*fault.target)]
        hosts = []
    else:
        name = fault.target[0]
        links = list(layout.links_of(name))
        # A leaf's host ports go with it (the hosts' own ends stay up: a dead switch does not reach them).
        hosts = [f"{name}-eth{h.leaf_port}" for h in layout.hosts if leaf_name(h.leaf) == name]
    return [f"{link.a}-eth{link.a_port}" for link in links] + [f"{link.b}-eth{link.b_port}" for link in links] + hosts
