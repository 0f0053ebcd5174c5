"""The control loop both engines drive: time and events go in, rule changes come out (faucet's Valve is the model).

A ``ControlLoop`` owns a scheduler and what is installed for every data flow. It does no I/O and reads no clock:
every call is given ``now``. The Ryu app (controller/scheduler_app.py) receives OpenFlow and worker events, calls
the loop, and sends the rules of the decisions it returns; the twin (twin/engine.py) calls the same loop at its
simulated times and applies the same decisions to its fluid network. So one scheduler is enforced the same way
in both engines, by construction:

* ``on_events(now, events)`` folds operation events into the scheduler; True when they call for a reconcile.
  A scheduler that ``hears_jobs`` is told first of a job's arrival (its first event) and, after its last
  operation's last ``done``, of its departure, and each calls for a reconcile;
* ``reconcile(now)`` asks the scheduler and returns only the flows whose decision changed (recorded as
  installed); ``due_period()`` says how often a periodic reconcile is wanted, if at all;
* ``install_all(now)`` returns every flow's decision (a switch connecting, the first decision of a run);
* ``fabric_change(now, fabric)`` tells the scheduler the links that are left and returns every flow's decision;
* ``pin(flow, decision)`` fixes a flow outside the scheduler (traffic checks); ``revert(flow, decision)`` undoes
  the record of a decision the engine could not install.

A scheduler that raises keeps the installed rules (and is counted in ``errors``): a policy bug must not take
the network down.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set

from controller.schedulers.base import Scheduler
from core.fabric import FabricView
from core.model import Decision, FlowKey, OperationEvent

LOG = logging.getLogger("flux.loop")

DEFAULT_DECISION = Decision()  # class 0, hashed path: what a flow gets when the policy does not name it


def changed_decisions(flows: Iterable[FlowKey], installed: Mapping[FlowKey, Decision],
                      wanted: Mapping[FlowKey, Decision]) -> Dict[FlowKey, Decision]:
    """The flows whose wanted decision differs from the installed one (a flow the policy does not name wants
    DEFAULT_DECISION), in the order of ``flows``."""
    changed = {}
    for flow in flows:
        d = wanted.get(flow, DEFAULT_DECISION)
        current = installed.get(flow)
        if current is not d and current != d:  # identity first: policies reuse Decision objects
            changed[flow] = d
    return changed


class ControlLoop:
    """One scheduler over the data flows of a run."""

    def __init__(self, scheduler: Scheduler, flows: Sequence[FlowKey]):
        self.scheduler = scheduler
        self.flows: List[FlowKey] = list(flows)
        self.installed: Dict[FlowKey, Decision] = {}
        self.pins: Dict[FlowKey, Decision] = {}
        self.reconcile_on = frozenset(scheduler.reconcile_on)
        self.jobs = {job.index: job for job in scheduler.jobs}
        self.arrived: Set[int] = set()
        self.departed: Set[int] = set()
        self._done: Counter = Counter()      # job -> "done" events of its last iteration
        self.decide_calls = 0
        self.events = 0
        self.errors = 0

    @property
    def period_s(self) -> Optional[float]:
        """Seconds between periodic reconciles, or None for a scheduler that wants none."""
        period = getattr(self.scheduler, "period_s", None)
        return float(period) if period else None

    @property
    def listens(self) -> bool:
        """Whether events or timers can change this scheduler's decisions (if not, it decides once)."""
        return bool(self.reconcile_on) or bool(self.period_s) or self.scheduler.hears_jobs

    # ------------------------------------------------------------------------------------------- inputs
    def on_events(self, now: float, events: Iterable[OperationEvent]) -> bool:
        """Fold operation events into the scheduler; True when one of them calls for a reconcile."""
        trigger = False
        hears = self.scheduler.hears_jobs
        for ev in events:
            self.events += 1
            job = self.jobs.get(ev.job)
            if hears and job is not None and ev.job not in self.arrived:
                self.arrived.add(ev.job)
                self.scheduler.on_job_arrival(job, now)
                trigger = True
            self.scheduler.on_event(ev, now)
            trigger = trigger or ev.kind in self.reconcile_on
            if hears and job is not None and ev.kind == "done" and ev.iteration == job.iterations - 1:
                self._done[ev.job] += 1
                if self._done[ev.job] == job.workers * len(job.model.buckets) and ev.job not in self.departed:
                    self.departed.add(ev.job)
                    self.scheduler.on_job_departure(job, now)
                    trigger = True
        return trigger

    def fabric_change(self, now: float, fabric: FabricView) -> Dict[FlowKey, Decision]:
        """The links that are up changed: the scheduler places its paths again; every flow's decision, to be
        rewritten in full (the rules are compiled for the new fabric)."""
        try:
            self.scheduler.on_fabric_change(fabric)
        except Exception:
            self.errors += 1
            LOG.exception("scheduler %s failed to take the fabric change", self.scheduler.name)
        return self.install_all(now)

    # ------------------------------------------------------------------------------------------ outputs
    def wanted(self, now: float) -> Dict[FlowKey, Decision]:
        """The scheduler's decisions now (the installed ones if it fails)."""
        self.decide_calls += 1
        try:
            return self.scheduler.decide(now)
        except Exception:
            self.errors += 1
            LOG.exception("scheduler %s failed to decide; keeping the installed rules", self.scheduler.name)
            return dict(self.installed)

    def install_all(self, now: float) -> Dict[FlowKey, Decision]:
        """Every flow's decision, recorded as installed."""
        wanted = self.wanted(now)
        decisions = {flow: wanted.get(flow, DEFAULT_DECISION) for flow in self.flows}
        self.installed.update(decisions)
        return decisions

    def reconcile(self, now: float) -> Dict[FlowKey, Decision]:
        """The decisions that changed since the last call, recorded as installed."""
        changed = changed_decisions(self.flows, self.installed, self.wanted(now))
        self.installed.update(changed)
        return changed

    def revert(self, flow: FlowKey, decision: Optional[Decision]) -> None:
        """The engine could not install a flow's new decision: ``decision`` (None: nothing) is what it holds."""
        if decision is None:
            self.installed.pop(flow, None)
        else:
            self.installed[flow] = decision

    def pin(self, flow: FlowKey, decision: Decision) -> bool:
        """Fix a flow (not a scheduled one) to a decision; True the first time it is pinned."""
        first = flow not in self.pins
        self.pins[flow] = decision
        return first
