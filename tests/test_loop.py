"""The control loop both engines drive (controller/loop.py), without a switch: events in, changed decisions out."""
from controller.loop import DEFAULT_DECISION, ControlLoop
from controller.schedulers.base import Scheduler
from core.fabric import FabricLayout, FabricSpec
from core.model import Decision, FlowKey, OperationEvent

LAYOUT = FabricLayout.from_spec(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
A = FlowKey("10.0.0.1", "10.0.0.3", 40000, 50000)
B = FlowKey("10.0.0.2", "10.0.0.4", 40001, 50001)


class Scripted(Scheduler):
    """Decides what a test tells it to; raises when told to."""

    name = "scripted"
    reconcile_on = ("wait",)
    period_s = 0.5

    def __init__(self, fabric, jobs, params=None):
        super().__init__(fabric, jobs, params)
        self.next = {}
        self.fail = False
        self.seen = []
        self.fabric_changes = 0

    def on_event(self, event, now):
        self.seen.append((event.kind, now))

    def on_fabric_change(self, fabric):
        super().on_fabric_change(fabric)
        self.fabric_changes += 1

    def decide(self, now):
        if self.fail:
            raise RuntimeError("policy bug")
        return dict(self.next)


def event(kind):
    return OperationEvent(kind=kind, job=0, rank=0, iteration=0, bucket=0, time=1.0)


def make():
    sched = Scripted(LAYOUT.view(), [])
    return sched, ControlLoop(sched, [A, B])


def test_install_all_gives_every_flow_a_decision_and_reconcile_only_the_changes():
    sched, loop = make()
    sched.next = {A: Decision(5)}
    assert loop.install_all(0.0) == {A: Decision(5), B: DEFAULT_DECISION}
    assert loop.reconcile(0.1) == {}                                   # nothing changed
    sched.next = {A: Decision(5), B: Decision(2, 1)}
    assert loop.reconcile(0.2) == {B: Decision(2, 1)}
    sched.next = {}
    assert loop.reconcile(0.3) == {A: DEFAULT_DECISION, B: DEFAULT_DECISION}   # unnamed flows go back to default
    assert loop.decide_calls == 4


def test_only_the_schedulers_reconcile_kinds_call_for_a_reconcile_and_every_event_reaches_it():
    sched, loop = make()
    assert loop.on_events(2.0, [event("launch")]) is False
    assert loop.on_events(2.5, [event("launch"), event("wait")]) is True
    assert sched.seen == [("launch", 2.0), ("launch", 2.5), ("wait", 2.5)] and loop.events == 3
    assert loop.period_s == 0.5 and loop.listens


def test_a_scheduler_that_raises_keeps_the_installed_rules_and_is_counted():
    sched, loop = make()
    sched.next = {A: Decision(4)}
    loop.install_all(0.0)
    sched.fail = True
    assert loop.reconcile(1.0) == {} and loop.errors == 1
    assert loop.installed[A] == Decision(4)


def test_a_fabric_change_reaches_the_scheduler_and_rewrites_every_flow():
    sched, loop = make()
    sched.next = {B: Decision(3)}
    loop.install_all(0.0)
    link = LAYOUT.links[0]
    out = loop.fabric_change(1.0, LAYOUT.without(frozenset({link})).view())
    assert sched.fabric_changes == 1 and out == {A: DEFAULT_DECISION, B: Decision(3)}


def test_a_reverted_flow_is_sent_again_and_pins_are_kept_apart():
    sched, loop = make()
    sched.next = {A: Decision(6)}
    loop.install_all(0.0)
    loop.revert(A, None)                   # the engine could not install it
    assert loop.reconcile(1.0) == {A: Decision(6)}
    other = FlowKey("10.0.0.1", "10.0.0.2", 1, 2)
    assert loop.pin(other, Decision(7)) is True and loop.pin(other, Decision(1)) is False
    assert loop.pins == {other: Decision(1)} and other not in loop.installed
