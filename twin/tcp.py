"""What TCP and the switches' class FIFOs add to the fluid rates in the twin: the artefact terms of twin.model.

Max-min rates alone make every flow smooth. The testbed's flows are TCP connections through strict-priority
class FIFOs of a fixed length, and that costs time the rates do not show: a flow starved by higher classes stops
and waits for its retransmission timer (backing off while it stays starved), a FIFO that holds too few packets
per flow overflows into timeouts, a step queues behind the bytes ahead of it in its FIFO (and, with
``queue_delay_s``, behind other jobs' flows), a step waits behind the packet a lower class has on the port, and a
flow that changes class with bytes in flight strands them in the old FIFO. ``TcpMixin`` marks these on every
rate allocation of ``FluidSim`` (twin/engine.py) and charges them, per step or per pipelined ring, when the ring
(twin/rings.py) finishes one, so the twin's iteration times and timeout counts follow the testbed's.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np

from core.queues import MTU_BYTES, queue_packets
from core.transport import TCP_PAYLOAD
from twin import events as kinds
from twin.network import Network


class TcpMixin:
    """``FluidSim``'s TCP artefacts: same-class queueing and backlog, FIFO overflow, head-of-line delay behind
    lower classes, starvation with its retransmission timeouts and backoff, and live class changes."""

    def _init_tcp(self, network: Network, n: int, queue_ms: float, lossless: bool,
                  window_packets: Optional[int]) -> None:
        """The class FIFOs' sizes on ``network``, and the marks, timers and counts of the ``n`` entities."""
        self.queued_now = np.zeros(n, dtype=bool)
        # A class FIFO overflows when it cannot hold fifo_flow_packets of every flow in it (testbed/qos.py sizes
        # it; the lossless transport profile sizes it so that it never can).
        self.overflow_on = self.p.overflow_timeouts > 0 and self.p.rto_s > 0 and not lossless
        fifo_packets = np.array([queue_packets(r, queue_ms) for r in network.rate_mbps], dtype=float)
        per_flow = np.full(network.links, max(self.p.fifo_flow_packets, 1e-9))
        if self.p.fifo_flow_rate_mbps > 0:
            # The threshold as a time of the link: scaled with each link's rate from the one it was stated at.
            per_flow = per_flow * network.rate_mbps / self.p.fifo_flow_rate_mbps
        self.fifo_flows = fifo_packets / per_flow
        # What a class FIFO holds at most, in bytes, and each entity's wait behind the bytes queued ahead of it:
        # the current one, and its integral since the entity started sending (queue_backlog).
        self.fifo_bytes = fifo_packets * MTU_BYTES
        # What one flow can have queued: its step's bytes, at most its receive window where the profile clamps it;
        # a lossless FIFO holds every flow's window (core/transport.py), so only the windows bound the backlog.
        self.window_bytes = float(window_packets) * TCP_PAYLOAD if window_packets else np.inf
        self.backlog_cap = np.full(network.links, np.inf) if lossless else self.fifo_bytes
        self.backlog_now = np.zeros(n)
        self.step_bytes = np.full(n, np.inf)    # a pipelined ring's bytes per step (one step in flight per hop)
        self.backlog_int = np.zeros(n)
        self.backlog_t = np.zeros(n)
        self.sending_since = np.zeros(n)
        self.overflow_now = np.zeros(n, dtype=bool)
        self.xfer_overflow = np.zeros(n, dtype=bool)
        # priority_hol_packets: whether a lower class had a link of the entity's path when its step started, the
        # longest packet time of those links, and how long the connection was idle before the step (its gap).
        self.xfer_hol = np.zeros(n, dtype=bool)
        self.hol_packet_s = np.zeros(n)
        self.idle_since = np.full(n, -np.inf)
        self.step_gap = np.zeros(n)
        self.packet_s = MTU_BYTES * 8.0 / network.capacity
        self.lowest_busy = np.full(network.links, 8, dtype=np.int64)
        self.xfer_queued = np.zeros(n, dtype=bool)
        self.starved_since = np.full(n, np.nan)
        self.starved_fifo = np.ones(n, dtype=np.int64)  # flows in its class FIFO when its starvation began
        self.starvations: Dict[int, int] = {}           # starvations of rto_s or more, by that number of flows
        self.backoff = np.zeros(n, dtype=np.int64)
        # rto_rttvar: each entity's RTT variance (Linux's rttvar, what its timer adds to the smoothed RTT), raised by
        # a starvation and decaying while it sends, from rttvar_mark (NaN: not sending, no round trips to count).
        self.rttvar = np.zeros(n)
        self.rttvar_mark = np.full(n, np.nan)
        self.fifo_delay = self.fifo_bytes * 8.0 / network.capacity
        self.timeouts: Dict[int, float] = {j.index: 0 for j in self.jobs}
        self.starvation_timeouts: Dict[int, float] = {j.index: 0 for j in self.jobs}
        self.starved_flow_s: Dict[int, float] = {j.index: 0.0 for j in self.jobs}
        self.live_class_changes = 0

    # ------------------------------------------------------------------------------------------------ queueing
    def _mark_queueing(self, idx: np.ndarray, rates: np.ndarray) -> None:
        """Flag the steps that cross a saturated link shared with another job's flow in their class, and those
        that cross a saturated link whose class FIFO overflows (more flows than it holds fifo_flow_packets for);
        with ``queue_backlog``, measure what each step's FIFOs hold ahead of it (``_mark_backlog``).

        Only other jobs count for the constant ``queue_delay_s`` (a constant charged behind the job's own
        operations too slowed a job alone in its class, docs/twin.md); the backlog counts every other flow by its
        bytes. Every flow counts for overflow: a FIFO drops whoever's packet arrives when it is full."""
        rows, links, saturated, key = self._class_links(idx, rates)
        n_links = self.net.links
        # Distinct jobs per (class, link): count each (key, job) pair once.
        pairs = np.unique(key * self.n_job_ids + self.ent_job[idx][rows])
        jobs_here = np.bincount(pairs // self.n_job_ids, minlength=8 * n_links)
        same = jobs_here[key] >= 2
        hit = np.zeros(idx.size, dtype=bool)
        hit[rows[saturated[links] & same]] = True
        self.xfer_queued[idx[hit]] = True
        self.queued_now[idx] = hit
        if self.p.queue_backlog > 0:
            self._mark_backlog(idx, rows, links, saturated, key)
        if self.overflow_on:
            flows_here = np.bincount(key, minlength=8 * n_links)
            over_entry = saturated[links] & (flows_here[key] > self.fifo_flows[links])
            over = np.zeros(idx.size, dtype=bool)
            over[rows[over_entry]] = True
            self.xfer_overflow[idx[over]] = True
            self.overflow_now[idx] = over
            if self.pipelined:
                # Distinct (ring, connection) pairs with a link in an overflowing FIFO, per ring.
                _rows, cols = np.nonzero(self.routes[idx] >= 0)
                width = self.route_conn.shape[1]
                owners = self.route_conn[idx[rows], cols]
                pairs = np.unique(rows[over_entry] * width + owners[over_entry])
                conns = np.bincount(pairs // width, minlength=idx.size)
                self.overflow_conns_now[idx] = conns / self.n_conns[idx]

    def _mark_backlog(self, idx: np.ndarray, rows: np.ndarray, links: np.ndarray, saturated: np.ndarray,
                      key: np.ndarray) -> None:
        """Each entity's wait behind the bytes queued ahead of it from now on: on every saturated link of its path,
        what the other flows in its class FIFO (its own job's included) still have to send, at most the FIFO's
        length, at the link's rate; the longest of its links. The previous value is integrated up to now."""
        if not rows.size:
            return
        # What a flow has in the network is its step's remaining bytes: a pipelined ring holds one step per hop.
        rem = np.minimum(np.minimum(self.rem[idx], self.step_bytes[idx]), self.window_bytes)[rows]
        ahead = np.bincount(key, weights=rem, minlength=8 * self.net.links)[key] - rem
        wait = np.where(saturated[links] & (ahead > 0),
                        np.minimum(ahead, self.backlog_cap[links]) * 8.0 / self.net.capacity[links], 0.0)
        # rows come in order (np.nonzero of the route matrix), so each flow's links are one run: reduce per run
        # (np.maximum.at is an order of magnitude slower at scale).
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        longest = np.zeros(idx.size)
        longest[rows[starts]] = np.maximum.reduceat(wait, starts)
        self.backlog_int[idx] += self.backlog_now[idx] * (self.now - self.backlog_t[idx])
        self.backlog_now[idx] = longest
        self.backlog_t[idx] = self.now

    def _backlog_delay(self, e: int, steps: int) -> float:
        """``queue_backlog`` for ``steps`` ring steps of entity e: its wait behind the bytes queued ahead of it,
        averaged over its time since it started sending, per step."""
        if self.p.queue_backlog <= 0:
            return 0.0
        span = self.now - self.sending_since[e]
        if span <= 0:
            return 0.0
        total = self.backlog_int[e] + self.backlog_now[e] * (self.now - self.backlog_t[e])
        return steps * self.p.queue_backlog * total / span

    def _reset_backlog(self, e: int) -> None:
        self.backlog_now[e] = self.backlog_int[e] = 0.0
        self.backlog_t[e] = self.sending_since[e] = self.now

    def _overflow_delay(self, e: int, steps: float) -> float:
        """Expected retransmission timeouts of ``steps`` ring steps of entity e for the share of its sending
        time it spent in an overflowing FIFO (counted for its job), and their cost in time."""
        if not self.overflow_on:
            return 0.0
        if self.pipelined:
            # The piece's share (the whole transfer's when the ring is one piece): a step waits while any of
            # its ranks overflows, and only those ranks' connections time out.
            share = self.overflow_time[e] / self.piece_time[e] if self.piece_time[e] > 0 else 0.0
            conn_share = self.overflow_conn_time[e] / self.piece_time[e] if self.piece_time[e] > 0 else 0.0
            self.overflow_time[e] = self.overflow_conn_time[e] = self.piece_time[e] = 0.0
        else:
            share = conn_share = float(self.xfer_overflow[e])
            self.xfer_overflow[e] = False
        self._count_timeouts(e, steps * conn_share * self.p.overflow_timeouts)
        return steps * share * self.p.overflow_timeouts * self._timer(e)

    # ------------------------------------------------------------------------------------------------ lower classes
    def _mark_lower_class(self, idx: np.ndarray, rates: np.ndarray) -> None:
        """Per link, the lowest class that takes more than its floor there: it fills the gaps the higher classes
        leave (``priority_hol_packets``; ``_meet_lower_class``)."""
        rows, _links, _saturated, key = self._class_links(idx, rates)
        n_links = self.net.links
        class_rate = np.bincount(key, weights=rates[rows] * 8.0, minlength=8 * n_links).reshape(8, n_links)
        busy = class_rate > self.class_floor * self.net.capacity * 1.01 + 1e-9      # [class, link]
        self.lowest_busy = np.where(busy.any(axis=0), busy.argmax(axis=0), 8)

    def _meet_lower_class(self, e: int) -> None:
        """Entity e starts a step (a pipelined ring: its operation): if a lower class had a link of its path during
        the gap before it, the step waits behind what that port took (``priority_hol_packets``)."""
        links = self.routes[e][self.routes[e] >= 0]
        hit = links[self.lowest_busy[links] < self.cls[e]]
        self.xfer_hol[e] = bool(hit.size)
        self.hol_packet_s[e] = float(self.packet_s[hit].max()) if hit.size else 0.0

    def _hol_delay(self, e: int, steps: int) -> float:
        """``priority_hol_packets`` for ``steps`` ring steps of entity e that met a lower class: each waits the gap
        before it, at most that many packet times (a pipelined ring's steps: the step latency)."""
        if self.p.priority_hol_packets <= 0 or not self.xfer_hol[e]:
            return 0.0
        self.xfer_hol[e] = False
        gap = self.p.step_latency_s if self.pipelined else self.step_gap[e]
        if gap < self.p.priority_hol_min_packets * self.hol_packet_s[e]:
            # Too short for the lower class to get past its floor (priority_hol_min_packets).
            return steps * self.p.priority_hol_floor_packets * self.hol_packet_s[e]
        return steps * min(gap, self.p.priority_hol_packets * self.hol_packet_s[e])

    # ------------------------------------------------------------------------------------------------ starvation
    def _timer(self, e: int) -> float:
        """Entity e's retransmission timer: ``rto_s``, or with ``rto_rttvar`` at least its RTT variance (Linux:
        the smoothed RTT plus the larger of the variance and 200 ms; the smoothed RTT is left out)."""
        if self.p.rto_rttvar <= 0:
            return self.p.rto_s
        self._decay_rttvar(e)
        return max(self.p.rto_s, float(self.rttvar[e]))

    def _sample_starvation(self, e: int, starved: float) -> None:
        """``rto_rttvar``: a packet that waited through a starvation of ``starved`` seconds is an RTT sample that
        far above the smoothed RTT, which Linux's estimator adds to the variance at once."""
        if self.p.rto_rttvar > 0:
            self.rttvar[e] = max(float(self.rttvar[e]), self.p.rto_rttvar * starved)
            self.rttvar_mark[e] = self.now

    def _decay_rttvar(self, e: int, stop: bool = False) -> None:
        """Linux lowers the variance by a quarter of its excess over 200 ms once per round trip in which data
        was acknowledged: per round trip of the FIFOs on e's path (their length at the link's rate) that e spent
        sending since its mark. ``stop``: e stops sending (starved, or its step ended)."""
        mark = self.rttvar_mark[e]
        if math.isnan(mark):
            return
        if self.rttvar[e] > self.p.rto_s:
            links = self.routes[e][self.routes[e] >= 0]
            rtt = float(self.fifo_delay[links].max()) if links.size else 0.0
            if rtt > 0:
                excess = (self.rttvar[e] - self.p.rto_s) * 0.75 ** ((self.now - mark) / rtt)
                self.rttvar[e] = self.p.rto_s + excess
        self.rttvar_mark[e] = np.nan if stop else self.now

    def _check_starvation(self, idx: np.ndarray, rates: np.ndarray) -> bool:
        """Start or end every flow's starvation; one that ends after ``rto_s`` or more waits for its timer.
        True when some flow went to sleep."""
        threshold = self.p.starve_share * self.net.capacity[self.first_link[idx]] / 8.0
        starving = rates < threshold
        since = self.starved_since[idx]
        begin = starving & np.isnan(since)
        self.starved_since[idx[begin]] = self.now
        if begin.any():
            self.starved_fifo[idx[begin]] = self._fifo_flows(idx, rates)[begin]
            if self.p.rto_rttvar > 0:
                for c in idx[begin]:
                    self._decay_rttvar(int(c), stop=True)
        ended = ~starving & ~np.isnan(since)
        slept = False
        for c in idx[ended]:
            slept = self._end_starvation(int(c)) or slept
        return slept

    def _fifo_flows(self, idx: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """For each flow of ``idx``, the most flows (connections) its class FIFO holds on a saturated link of its
        path (1 when none of its links is saturated)."""
        rows, links, saturated, key = self._class_links(idx, rates)
        flows_here = np.bincount(key, minlength=8 * self.net.links)
        most = np.ones(idx.size, dtype=np.int64)
        on = saturated[links]
        np.maximum.at(most, rows[on], flows_here[key[on]])
        return most

    def _backs_off(self, c: int) -> bool:
        """Whether flow c's starvation follows the backoff rule (``rto_backoff``, and enough flows in its FIFO when
        it began, ``starve_backoff_flows``) rather than the one-timeout reading."""
        return bool(self.p.rto_backoff) and self.starved_fifo[c] >= self.p.starve_backoff_flows

    def _count_starvation(self, c: int, starved: float) -> None:
        if starved >= self.p.rto_s:
            k = int(self.starved_fifo[c])
            self.starvations[k] = self.starvations.get(k, 0) + 1
            self.starved_flow_s[int(self.ent_job[c])] += starved

    def _count_timeouts(self, e: int, per_connection: float, starved: bool = False) -> None:
        """Charge entity e's job ``per_connection`` timeouts for each connection the entity carries; ``starved``:
        the starvation rule's."""
        count = per_connection * len(self.ent_conns[e])
        self.timeouts[int(self.ent_job[e])] += count
        if starved:
            self.starvation_timeouts[int(self.ent_job[e])] += count

    def _adaptive_timeout(self, c: int, starved: float, timer: float) -> None:
        """``rto_backoff`` off: a starvation as long as the flow's timer or longer cost one timeout, at its onset,
        and nothing after it: the flow went on at what its class was left (the floor), its RTO grew with the RTT
        it measured there, and it sends again as soon as capacity is back."""
        if starved >= timer:
            self._count_timeouts(c, 1, starved=True)

    def _close_starvation(self, c: int) -> Optional[Tuple[float, int]]:
        """Flow c's starvation (if any) ends now: count it, let it raise c's timer and charge its timeouts. Under
        the backoff rule, when c's timer lets it send again and how many timers fired until then; None when it
        goes on at once."""
        since = self.starved_since[c]
        self.starved_since[c] = np.nan
        if math.isnan(since):
            return None
        starved = self.now - since
        self._count_starvation(c, starved)
        timer = self._timer(c)
        self._sample_starvation(c, starved)
        if not self._backs_off(c):
            self._adaptive_timeout(c, starved, timer)
            return None
        base = timer * (2 ** int(self.backoff[c]))
        if starved < base:
            return None
        # Timers fire at since + base (2^k - 1); the flow resumes at the first one at or after now.
        k = max(1, math.ceil(math.log2(starved / base + 1) - 1e-12))
        self._count_timeouts(c, k, starved=True)
        return since + base * (2 ** k - 1), k

    def _end_starvation(self, c: int, not_before: float = 0.0) -> bool:
        """Capacity is back for flow c: if it was starved long enough to time out, it sleeps until its next
        retransmission timer, and in any case until ``not_before`` (True), else it goes on at once (False)."""
        timed_out = self._close_starvation(c)
        resume = not_before
        if timed_out is not None:
            resume = max(resume, timed_out[0])
            self.backoff[c] += timed_out[1]
        if resume > self.now + kinds.EPS_T and not self.suspended[c]:
            self.suspended[c] = True
            self.dirty = True
            self._push(resume, kinds.RESUME_FLOW, c)
            return True
        return False

    def _starved_tail(self, c: int) -> float:
        """Timeouts of an entity that finished while starved, and the wait for the timer that sent its last
        bytes."""
        if self.p.rto_s <= 0:
            return 0.0
        timed_out = self._close_starvation(c)
        return 0.0 if timed_out is None else timed_out[0] - self.now

    # ------------------------------------------------------------------------------------------------ class changes
    def _change_live_class(self, e: int) -> None:
        """Flow e, with bytes in flight, changed class. Only a flow starved in its old class (sending at under
        ``starve_share`` of its host link until now) pays: what it has in flight stays in the old FIFO, behind
        the class that starved it. It loses ``class_change_s``: the packets it sends next in the new class let
        TCP detect and resend the stranded ones. With ``class_change_strands``, that holds only if its step has
        more left than it can have in flight (its window, or what its host link's FIFO holds where the profile
        sets none); if not, the stranded bytes are the step's tail, nothing follows them, and the step waits
        until they drain at the flow's old rate or its retransmission timer fires and resends them (one
        timeout), whichever is first. scripts/bench_class_change.py measured both cases. The starvation ends
        here, and a timer it already earned is waited for as well."""
        starved = self.rate[e] < self.p.starve_share * self.net.capacity[self.first_link[e]] / 8.0
        if not (self.p.class_change_strands or self.p.class_change_s) or self.suspended[e] or not starved:
            return
        in_flight = min(self.window_bytes, float(self.fifo_bytes[self.first_link[e]]))
        if not self.p.class_change_strands or self.rem[e] > in_flight:
            cost = self.p.class_change_s
        else:
            timer = self._timer(e)
            drain = float(self.rem[e]) / self.rate[e] if self.rate[e] > 0 else math.inf
            if drain >= timer:
                self._count_timeouts(e, 1)
            cost = min(drain, timer)
        self._end_starvation(e, not_before=self.now + cost)
