"""The controller as the twin sees it: the workers' events reach it late, it decides in batches, and its
decisions reach the network later still.

The decisions themselves come from the project's ``ControlLoop`` (controller/loop.py), the very loop the Ryu app
drives in the emulation, so a scheduler is enforced the same way in both engines. What the twin adds is the
time around it, from twin.model: an ``OperationEvent`` arrives ``event_latency_s`` after it happened; events the
scheduler reconciles on make it decide once per ``decide_batch_s`` window (and so does its ``period_s`` timer);
what it decides is installed ``reaction_latency_s`` later, each changed flow's class and path. ``ControlMixin``
does this for ``FluidSim`` (twin/engine.py), whose event loop runs the timers.
"""
from __future__ import annotations

import math
from typing import List, Mapping

from controller.loop import ControlLoop
from controller.schedulers.base import Scheduler
from core.model import Decision, FlowKey, OperationEvent
from twin import events as kinds
from twin.rings import Op


class ControlMixin:
    """``FluidSim``'s controller: the workers' events to the control loop, its decisions to the network."""

    def _init_control(self, scheduler: Scheduler, keys: List[FlowKey]) -> None:
        """The control loop of ``scheduler`` over the connections ``keys``, and its counts."""
        self.events = 0
        self.events_sent = 0
        self.flow_changes = 0
        # The controller's own loop, at simulated times: the same decisions, diffed the same way, as in the emulation.
        self.loop = ControlLoop(scheduler, keys)
        self.uses_events = self.loop.listens
        self._decide_pending = False
        self._pending_events: List[OperationEvent] = []

    def _emit(self, kind: str, op: Op, rank: int, bytes_done: int = 0) -> None:
        if self.op_trace is not None and kind in ("launch", "done"):
            times = self.op_trace.setdefault((op.job.index, op.iteration, op.bucket), {}).setdefault(
                rank, [math.nan, math.nan])
            times[0 if kind == "launch" else 1] = self.now
        self.events_sent += 1
        if not self.uses_events:
            return  # a policy without events or timers decides once: the events would change nothing
        ev = OperationEvent(kind=kind, job=op.job.index, rank=rank, iteration=op.iteration, bucket=op.bucket,
                            time=self.now, nbytes=op.nbytes, bytes_done=bytes_done, needed_at=op.needed_at[rank])
        self._push(self.now + self.p.event_latency_s, kinds.EVENTS, ev)

    def _deliver(self, ev: OperationEvent) -> None:
        self.events += 1
        if self.loop.on_events(self.now, [ev]) and not self._decide_pending:
            self._decide_pending = True
            self._push(self.now + self.p.decide_batch_s, kinds.DECIDE)

    def _decide(self) -> None:
        changes = self.loop.reconcile(self.now)
        if self.p.reaction_latency_s > 0:
            self._push(self.now + self.p.reaction_latency_s, kinds.APPLY, changes)
        else:
            self._apply(changes)

    def _apply(self, changes: Mapping[FlowKey, Decision]) -> None:
        """Install the decisions that changed (the control loop's output), each flow's class and path."""
        for key, d in changes.items():
            c = self.conn_of.get(key)
            if c is None:
                continue
            old = self.decision[c]
            if old == d:
                continue
            self.flow_changes += 1
            self.decision[c] = d
            e = self.ent_of[c]
            if old.path != d.path and self.n_paths[c] > 1:
                self._set_route(e)
                self.dirty = self.dirty or self.active[e]
            if old.priority_class != d.priority_class:
                cls = self._entity_class(e)
                if cls == self.cls[e]:
                    continue
                self.cls[e] = cls
                if self.active[e]:
                    self.dirty = True
                    if self.rem[e] > 0:
                        self.live_class_changes += 1
                        self._change_live_class(e)
