"""The twin's parameters: what the model assumes, each artefact of the emulation a named term that is off in the
ideal model.

The ideal model is a fluid network (``twin/network.py``) with the testbed's topology, classes and link rates, the
workers' iteration program and the scheduler's decisions, and nothing else. The emulation adds effects of
TCP, Open vSwitch and Linux that are not scheduling; each has one parameter here:

``goodput``         fraction of a link's configured rate that carries payload (Ethernet/IP/TCP headers, ACKs).
``step_latency_s``  fixed cost of every ring step before its bytes flow (a message's system calls, the first
                    packet's way through the fabric, TCP's ACK clock on a handful of packets).
``step_latency_cv`` how much the step latency varies: 0, every step takes exactly ``step_latency_s``; above
                    0, each step's latency is drawn from a gamma distribution with that mean and this coefficient
                    of variation, from the run's seed (1: exponential). The emulation's timing is not the same
                    twice, and where jobs' phases can settle two ways a model without noise always settles the
                    same way; the mean stays ``step_latency_s``.
``queue_delay_s``   extra delay of a ring step whose flow crossed a saturated link while another job's flow of
                    its class was there too (a FIFO per class: its packets wait behind the other flow's queue).
                    A constant, and blind to the job's own operations; the fit now prefers ``queue_backlog``.
``job_fifo_order``  how far a class FIFO serves a job's operations in launch order: among one job's flows
                    with the same class and route, this share of each one's max-min rate goes to the flow of the
                    operation launched first (0: the fluid model's fair sharing; 1: strictly first come, first
                    served inside the job). Not calibrated: measured against the suite in docs/twin-log.md.
``progress_weight`` sharing that is not max-min: inside a class, a flow's weight is 1 plus this times the
                    fraction of its operation's ring steps done (weighted max-min), so the operation that is
                    further along gets more and jobs in step drift apart. Not calibrated: tried against the
                    suite in docs/twin-log.md.
``share_cv``        sharing that is not exactly fair: inside a class, each ring step (each ring, pipelined) weighs
                    a number drawn when it starts, from a gamma distribution of mean 1 and this coefficient of
                    variation (the run's seed), and gets its weight times its bottleneck's level (weighted
                    max-min). TCP flows in one FIFO do not get equal shares over a step of a few round trips;
                    noise of this kind lets jobs that max-min sharing keeps in one phase drift apart. Not
                    calibrated: tried against the suite in docs/twin-log.md. 0: max-min.
``fifo_order``      how far a class FIFO serves the steps in it first come, first served instead of sharing it:
                    that share of each class's part of the links goes to the steps in the order they started,
                    each taking what its path has left (twin/network.py ``first_come``), the rest is shared
                    max-min. A step of a few packets, fewer than its FIFO holds, goes through the FIFO nearly
                    whole behind the ones that came before it; max-min sharing slows equal steps equally and
                    keeps equal jobs in one phase, first come, first served lets the one ahead stay ahead.
                    Not calibrated: tried against the suite in docs/twin-log.md. 0: max-min.
``share_alpha``     sharing that is alpha-fair instead of max-min inside a class (twin/network.py ``alpha_fair``):
                    1 is proportional fairness, 2 the sharing TCP Reno's window rule converges to (minimum
                    potential delay), large values approach max-min. Max-min gives a flow its bottleneck's fair
                    share however many other busy links it crosses; under TCP a flow that crosses more of them
                    (more loss, a longer round trip) gets less, and the flows beside it that cross fewer get more.
                    0: max-min.
``queue_backlog``   a ring step's wait behind the packets queued ahead of it in its class FIFO, which the fluid
                    model's sharing does not have (a FIFO serves packets in the order they came, so a short
                    message behind a long one waits for the queue first): on every saturated link of its path,
                    the bytes that the other flows in its class (its own job's other operations included) still
                    have to send, at most the FIFO's length, at the link's rate; the longest of its links,
                    averaged over the step's time in the network, times this weight, is added to the step.
                    0: off.
``priority_hol_packets`` a ring step's wait behind a lower class, in packet times of the link. While a
                    connection's class leaves a port idle (between its ring steps), a lower class sends there, and
                    the packets the port has already taken are sent before the next step's, whatever its priority.
                    A step whose path crosses a link where a lower class gets more than its floor waits the gap
                    before it (since its connection's previous step), at most this many packet times (1500 bytes
                    at the link's rate). Measured, not fitted: bench/priority_share.py, a message flow in
                    a higher class and bulk flows in a lower one, 2.1-2.8 packet times per message at 2.5, 5 and
                    10 Mbit/s after a pause of 5 ms or more (whatever the message's size and the number of lower
                    flows), about the pause after a shorter one (1.8 ms after 2 ms at 5 Mbit/s), 0.2 packet times
                    when the pause is too short for the lower class to get past its floor. In the pipelined ring
                    model the gap is ``step_latency_s``. 0: off.
``priority_hol_min_packets`` after a gap shorter than this many packet times a step waits only
                    ``priority_hol_floor_packets``: the benchmark held the lower class to its floor after pauses
                    under about 0.6-0.8 packet times. 0: every gap counts in full.
``priority_hol_floor_packets`` the wait after a gap too short for the lower class (under
                    ``priority_hol_min_packets``): the benchmark measured 0.19-0.21 packet times there (the lower
                    class's floor still puts a packet in the port now and then), at 2.5 and 5 Mbit/s.
``rto_s``           retransmission timeouts: a flow held below ``starve_share`` of its host link for ``rto_s``
                    times out. With ``rto_backoff`` 1 it loses its window and only sends again when its timer
                    fires, at rto_s, 2 rto_s, 4 rto_s ... after it was starved (exponential backoff), even if
                    capacity came back earlier (the calibrated model). With ``rto_backoff`` 0 it times out once,
                    at the onset, and goes on as soon as capacity is back, as if its RTO had grown with the RTT
                    it measured under the class floor (RFC 6298) and no timer were left to wait for; tried
                    against the suite, it made ByteScheduler's pairs optimistic (docs/twin-log.md). 0: off.
``rto_rttvar``      a connection's retransmission timer follows its RTT variance, as Linux's does (RFC 6298: the
                    smoothed RTT plus four mean deviations, at least 200 ms): a packet that waited in its FIFO
                    through a starvation of D seconds is an RTT sample D above the others, which raises the
                    variance to this weight times D at once (2.0-2.9 for windows of 3-20 packets, from Linux's
                    estimator); it falls back by a quarter of its excess over ``rto_s`` per round trip the
                    connection spends sending (a round trip: its FIFOs' length at the link rate), not while it is
                    idle. The timer (at least ``rto_s``) is what a starved flow waits for, what an overflow
                    timeout costs and, with ``rto_backoff`` 0, how long a starvation must last to count as a
                    timeout. research/tcp_timers.py measured such timers (docs/twin-log.md); tried against the suite,
                    not calibrated. 0: ``rto_s`` always.
``starve_backoff_flows`` the backoff rule applies to a flow starved while its class FIFO on a saturated link of
                    its path holds at least this many flows (itself included); one with fewer takes the
                    ``rto_backoff`` 0 reading. bench/starvation.py measured a flow alone at the class floor
                    going on within 0.02 s of the starvation's end, and flows that share the FIFO losing packets
                    and timing out. 1: every starved flow follows ``rto_backoff`` (the calibrated model).
``overflow_timeouts`` retransmission timeouts (each costing ``rto_s``) expected per ring step that crossed a
                    saturated link whose class FIFO overflows: it holds fewer than ``fifo_flow_packets`` packets
                    for each of its flows (the FIFO's length is testbed/qos.py's, ``queue_ms`` of the link rate),
                    so a flow's window falls below what fast retransmit needs and losses end in timeouts. Charged
                    for the share of the step's time spent there. 0: off; never under the lossless profile.
``fifo_flow_rate_mbps`` the rate at which ``fifo_flow_packets`` is stated, when above 0: at a link of another
                    rate the threshold is scaled with it, a fixed time of the link per flow (1.5 packets at 5
                    Mbit/s: 0.75 at 2.5) instead of a fixed number of packets. 0: packets at every rate. The
                    calibrated model states it at 5 Mbit/s, its fit's rate (nothing changes there): counted in
                    packets the rule put ECMP 0.14-0.19 low at 2.5 Mbit/s; as a time of the link it kept ECMP
                    within the bands at 2.5 and, held out, at 3.5 and 10 Mbit/s (docs/twin-log.md, At other link
                    rates).
``class_change_s``  what a live class change costs a flow that was starved in its old class (sending at under
                    ``starve_share`` of its host link) while it had bytes in flight: those bytes stay in the old
                    FIFO and TCP resends them once the flow's later packets, in the new class, are acknowledged;
                    it stops for this long. A flow that was not starved goes on at once.
                    bench/class_change.py measured, per raise out of a busy class, 0.04-0.11 s (medians)
                    for bulk flows under tcp and 0.12-0.24 s under lossless (0.1 calibrated), and nothing out of
                    an idle class. 0: off.
``class_change_strands`` 1: the same only where more of the flow's step follows what it has in flight (its window,
                    or its host link's FIFO where the profile sets no window); otherwise the stranded bytes are
                    the step's tail, nothing follows them, and the step waits until they drain at the flow's old
                    rate or its timer (``rto_s``, at least the profile's minimum) fires, whichever is first (one
                    timeout then). The benchmark measured such tails (messages of one window): 0.12-0.68 s and
                    one timeout per raise under tcp, 0.78-1.32 s draining at the class floor under lossless. Tried
                    against the suite and not calibrated (docs/twin-log.md). 0: off.

Two parameters of the controller are not artefacts and are the same in both models: ``event_latency_s`` (worker
to controller) and ``reaction_latency_s`` (decision to rules in the switches); ``decide_batch_s`` is how long the
controller collects events before deciding once for all of them (it handles events in batches).

``IDEAL`` has every artefact off. ``calibrated()`` reads the fitted terms from ``twin/calibrated.json``, which
``research/fit_twin.py`` writes from finished ECMP emulation runs only (so that any agreement on the other
policies is a prediction, not a fit); the measured terms (``goodput``, ``rto_s``, ``priority_hol_packets`` and
its short-gap rule, ``class_change_s``) come from benchmarks. ``physical()``
keeps those and turns the fitted delays off (``step_latency_s``, ``queue_delay_s``, ``queue_backlog``,
``overflow_timeouts``): the optimistic end of the calibrated model, which scripts/bounds.py uses so that a bound
is not lowered by a fitted delay.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional, Union

CALIBRATED_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibrated.json")
ARTEFACTS = ("goodput", "step_latency_s", "queue_delay_s", "queue_backlog", "priority_hol_packets", "rto_s",
             "overflow_timeouts", "class_change_s", "class_change_strands")


@dataclass(frozen=True)
class ModelParams:
    """Every parameter of the fluid model (see the module docstring)."""

    goodput: float = 1.0
    step_latency_s: float = 0.0
    step_latency_cv: float = 0.0
    queue_delay_s: float = 0.0
    queue_backlog: float = 0.0
    job_fifo_order: float = 0.0
    progress_weight: float = 0.0
    share_cv: float = 0.0
    fifo_order: float = 0.0
    share_alpha: float = 0.0
    priority_hol_packets: float = 0.0
    priority_hol_min_packets: float = 0.0
    priority_hol_floor_packets: float = 0.0
    rto_s: float = 0.0
    starve_share: float = 0.02
    rto_backoff: float = 1.0
    starve_backoff_flows: float = 1.0
    overflow_timeouts: float = 0.0
    fifo_flow_packets: float = 2.0
    fifo_flow_rate_mbps: float = 0.0
    rto_rttvar: float = 0.0
    class_change_s: float = 0.0
    class_change_strands: float = 0.0
    event_latency_s: float = 0.0005
    reaction_latency_s: float = 0.005
    decide_batch_s: float = 0.001

    def __post_init__(self):
        if not 0 < self.goodput <= 1:
            raise ValueError(f"goodput must be in (0, 1] (got {self.goodput})")
        for f in fields(self):
            if f.name != "goodput" and getattr(self, f.name) < 0:
                raise ValueError(f"{f.name} must be >= 0 (got {getattr(self, f.name)})")
        for name in ("job_fifo_order", "fifo_order"):
            if getattr(self, name) > 1:
                raise ValueError(f"{name} must be in [0, 1] (got {getattr(self, name)})")

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelParams":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown model parameter(s) {', '.join(sorted(unknown))}; known: "
                             f"{', '.join(sorted(known))}")
        return cls(**{k: float(v) for k, v in d.items()})

    def with_(self, **changes) -> "ModelParams":
        return replace(self, **changes)


IDEAL = ModelParams()

#: The link rate of the emulation runs the calibration was fitted and measured on (scripts/suite.py's).
CALIBRATION_RATE_MBPS = 5.0
#: The link rates at which the calibrated twin was checked against emulation runs it was not fitted on
#: (docs/twin-log.md, At other link rates): the suite at 2.5 and 3.5 Mbit/s, the suite and the headline at 10.
CHECKED_RATES_MBPS = (2.5, 10.0)


def calibration_notes(params: ModelParams, host_rate_mbps: float, fabric_rate_mbps: float,
                      lossless: bool = False) -> list:
    """What a run's results should say about the model's terms at the run's rates. The overflow-timeout rule was
    fitted at CALIBRATION_RATE_MBPS; counted in packets per flow (``fifo_flow_rate_mbps`` 0) it did not carry to
    2.5 or 3.5 Mbit/s, stated as a time of the link (the calibrated model) it did, and the calibration as a whole
    was checked from 2.5 to 10 Mbit/s only (docs/twin-log.md, At other link rates)."""
    rates = {host_rate_mbps, fabric_rate_mbps}
    overflow_on = params.overflow_timeouts > 0 and params.rto_s > 0 and not lossless
    notes = []
    if overflow_on and params.fifo_flow_rate_mbps <= 0 and rates != {CALIBRATION_RATE_MBPS}:
        notes.append(f"the overflow-timeout rule (overflow_timeouts, fifo_flow_packets) was fitted at "
                     f"{CALIBRATION_RATE_MBPS:g} Mbit/s and here counts packets per flow in a FIFO; so counted, at "
                     f"2.5 Mbit/s it expected 8-80 times the emulation's ECMP timeouts on the suite's pairs and put "
                     f"ECMP up to 0.19 low; --twin-set fifo_flow_rate_mbps={CALIBRATION_RATE_MBPS:g} (the "
                     f"calibrated model's) states it as a time of the link, which held at 2.5, 3.5 and 10 Mbit/s "
                     f"(docs/twin-log.md, At other link rates)")
    low, high = CHECKED_RATES_MBPS
    outside = sorted(r for r in rates if not low <= r <= high)
    if outside and any(getattr(params, name) != getattr(IDEAL, name) for name in ARTEFACTS):
        notes.append(f"the calibrated terms were fitted at {CALIBRATION_RATE_MBPS:g} Mbit/s and checked against "
                     f"the emulation from {low:g} to {high:g} Mbit/s only; this run's "
                     f"{', '.join(f'{r:g}' for r in outside)} Mbit/s links are outside that range")
    return notes


#: The calibrated model's measured terms (goodput, rto_s, rto_backoff, priority_hol_*, class_change_s), the form of
#: its overflow rule (fifo_flow_packets stated at the calibration's rate, so a time of the link: held out at 3.5
#: and 10 Mbit/s, docs/twin-log.md), and its fitted terms until a fit is written (the prototype's values).
DEFAULT_CALIBRATION = {"goodput": 0.956, "step_latency_s": 0.004, "queue_delay_s": 0.030, "rto_s": 0.2,
                       "rto_backoff": 1.0, "priority_hol_packets": 2.5, "priority_hol_min_packets": 0.7,
                       "priority_hol_floor_packets": 0.2, "class_change_s": 0.1,
                       "fifo_flow_rate_mbps": CALIBRATION_RATE_MBPS}


def calibrated(path: str = CALIBRATED_FILE) -> ModelParams:
    """The calibrated model: the fitted terms of ``path`` (written by research/fit_twin.py) over the defaults."""
    terms = dict(DEFAULT_CALIBRATION)
    try:
        with open(path) as f:
            terms.update(json.load(f).get("params", {}))
    except FileNotFoundError:
        pass
    return ModelParams.from_dict(terms)


#: The calibrated model's terms that a fit sets (physical() turns them off).
FITTED_TERMS = ("step_latency_s", "queue_delay_s", "queue_backlog", "overflow_timeouts")


def physical(path: str = CALIBRATED_FILE) -> ModelParams:
    """The calibrated model with its fitted delays off: measured terms only (the module docstring)."""
    return replace(calibrated(path), **{name: 0.0 for name in FITTED_TERMS})


def resolve_model(model: Union[str, ModelParams, Mapping[str, Any], None]) -> ModelParams:
    """``"ideal"``, ``"calibrated"``, ``"physical"``, a JSON file with ``{"params": {...}}``, a mapping or
    ModelParams."""
    if model is None or model == "calibrated":
        return calibrated()
    if model == "physical":
        return physical()
    if isinstance(model, ModelParams):
        return model
    if model == "ideal":
        return IDEAL
    if isinstance(model, Mapping):
        return ModelParams.from_dict(model)
    if isinstance(model, str) and os.path.isfile(model):
        return calibrated(model)
    raise ValueError(f"model must be 'ideal', 'calibrated', 'physical', a parameter file or a mapping "
                     f"(got {model!r})")


def parse_model_overrides(items, base: Optional[ModelParams] = None) -> ModelParams:
    """``["rto_s=0", "goodput=0.95"]`` applied over ``base`` (default: the calibrated model)."""
    base = base or calibrated()
    changes = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"model parameter {item!r} is not of the form name=value")
        try:
            changes[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"model parameter {item!r}: {value!r} is not a number") from None
    return ModelParams.from_dict({**base.to_dict(), **changes})
