"""kind: flows — steady UDP flows between host NICs, the runner's built-in traffic.

Every flow sends `pps` small datagrams per second from one NIC to another (bound to the NIC,
so it leaves through its rail). Each interval the workload emits, per flow, how many packets
sent in that interval arrived and the longest delay among them, once they had time to arrive:
a drop shows as loss, a pause as delay. With `dodge`, a flow that loses packets, or whose path
crosses a link a detector has named, moves to a source port whose path avoids the suspected
link (twin/mitigate/dodge.py; `dodge: offset`: by its path offset, mitigate/offset_dodge.py).
"""

from __future__ import annotations

import select
import struct
import threading
import time
from collections import defaultdict
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from twin.lab.traffic import bound_udp_socket
from twin.mitigate.dodge import TRACE_FLOW, Dodger, Request
from twin.mitigate.offset_dodge import OffsetDodger
from twin.model.nics import Nic, fabric_nics, fabric_pairs, require_fabric_pairs, require_single_port
from twin.sockopts import send
from twin.workloads.base import WorkloadContext

PORT = 47001
GRACE_S = 2.0  # a packet later than this after its interval ends counts as lost
WARMUP_S = 2.0  # the first intervals include ARP and socket set-up: not a fault's loss
DODGE_WAIT_S = 0.3  # with dodge: an interval's loss is acted on this long after it ends


class FlowsParams(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    pairs: Literal["all", "ring"] = Field("all", description="all NIC pairs across hosts, or a ring")
    pps: int = Field(20, ge=1, le=2000, description="packets per second per flow")
    interval_ms: int = Field(500, ge=100, le=10000, description="reporting interval")
    flows_per_pair: int = Field(1, ge=1, le=16,
                                description="flows (source ports) per NIC pair; more spread over ECMP paths")
    dodge: Literal[False, True, "offset"] = Field(
        False, description="hash dodging: a flow that loses packets, or crosses a link a detector named, moves "
                           "to a source port whose path avoids the suspected link; true: found by path discovery "
                           "(random source ports, traced); offset: the next path offset (a lab with "
                           "routing.hash_offset), known without tracing")


def check_flows(params: FlowsParams, fabric) -> None:
    require_fabric_pairs(fabric, "a flows workload")
    if params.dodge:
        require_single_port(fabric, "dodge (it traces a flow's path from its host link)")
    if params.dodge == "offset" and not fabric.hash_offset:
        raise ValueError(f"dodge: offset moves a flow by its path offset, and lab {fabric.name} hashes with the "
                         "kernel's ECMP (set `routing.hash_offset: true` in the lab file, or use `dodge: true`)")


def choose_pairs(nics: list[Nic], mode: str) -> list[tuple[Nic, Nic]]:
    if mode == "all":
        return [(nics[s], nics[d]) for s, d in fabric_pairs(nics)]
    ordered = sorted(nics, key=lambda n: (n.ifname, n.host))
    ring = [(a, b) for a, b in zip(ordered, ordered[1:] + ordered[:1]) if a.host != b.host]
    return ring


class Flows:
    def __init__(self, ctx: WorkloadContext, params: FlowsParams, name: str):
        self.lab, self.params, self.events, self.name = ctx.lab, params, ctx.events, name
        self.pairs = choose_pairs(fabric_nics(ctx.lab.fabric), params.pairs) * params.flows_per_pair
        dodger = OffsetDodger if params.dodge == "offset" else Dodger
        self.dodger = dodger(ctx.lab, ctx.events, name, PORT) if params.dodge else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"flows-{name}", daemon=True)

    def start(self) -> None:
        if self.dodger:
            self.dodger.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=GRACE_S + 5)
        if self.dodger:
            self.dodger.stop()

    def label(self, flow: int) -> str:
        src, dst = self.pairs[flow]
        return f"{src.label} -> {dst.label} #{flow // (len(self.pairs) // self.params.flows_per_pair)}"

    def _run(self) -> None:
        interval = self.params.interval_ms / 1000
        receivers = {nic.label: bound_udp_socket(self.lab, nic, PORT) for nic in {d for _s, d in self.pairs}}
        senders = [bound_udp_socket(self.lab, src, 0) for src, _d in self.pairs]
        for sock in (*receivers.values(), *senders):
            sock.setblocking(False)
        sent = defaultdict(int)  # (flow, interval) -> packets sent
        got = defaultdict(int)  # (flow, interval) -> packets received
        delay = defaultdict(float)  # (flow, interval) -> longest delay
        start = time.monotonic()
        done_sending = [0] * len(self.pairs)
        reported, stopped_at = 0, None
        dodging = _DodgeState(len(self.pairs), int(WARMUP_S / interval)) if self.dodger else None
        try:
            while True:
                now = time.monotonic()
                if not self._stop.is_set():
                    self._send_due(now - start, interval, senders, done_sending, sent)
                elif stopped_at is None:
                    stopped_at = now
                self._receive(receivers, got, delay)
                if dodging:
                    self._dodge(dodging, now - start, interval, senders, sent, got)
                # an interval is reported once its packets had GRACE_S to arrive
                ripe = int((now - start - GRACE_S) / interval)
                if stopped_at is not None:
                    last = int((stopped_at - start) / interval) + 1
                    ripe = last if now - stopped_at > GRACE_S else min(ripe, last)
                while reported < ripe:
                    self._report(reported, interval, start, sent, got, delay)
                    reported += 1
                if stopped_at is not None and now - stopped_at > GRACE_S:
                    return
        finally:
            for sock in (*receivers.values(), *senders):
                sock.close()

    def _send_due(self, elapsed, interval, senders, done_sending, sent) -> None:
        due, bucket = int(elapsed * self.params.pps), int(elapsed / interval)
        for flow, (_src, dst) in enumerate(self.pairs):
            while done_sending[flow] < due:
                payload = struct.pack("!HId", flow, bucket, time.monotonic()).ljust(48, b"\0")
                send(senders[flow], payload, (dst.address, PORT))  # unsent (no route): counted as lost
                sent[(flow, bucket)] += 1
                done_sending[flow] += 1

    @staticmethod
    def _receive(receivers, got, delay) -> None:
        ready, _, _ = select.select(list(receivers.values()), [], [], 0.005)
        for sock in ready:
            while True:
                try:
                    data = sock.recv(256)
                except BlockingIOError:
                    break
                flow, bucket, sent_at = struct.unpack("!HId", data[:14])
                if flow == TRACE_FLOW:
                    continue
                got[(flow, bucket)] += 1
                delay[(flow, bucket)] = max(delay[(flow, bucket)], time.monotonic() - sent_at)

    def _report(self, bucket, interval, start, sent, got, delay) -> None:
        t = start - self.events.t0 + bucket * interval
        for flow in range(len(self.pairs)):
            n = sent.pop((flow, bucket), 0)
            if n:
                m = got.pop((flow, bucket), 0)
                self.events.emit("flow", t=t, span_s=interval, workload=self.name, flow=self.label(flow),
                                 sent=n, received=m, loss_pct=round(100.0 * (n - m) / n, 2),
                                 max_delay_ms=round(delay.pop((flow, bucket), 0.0) * 1000, 2))

    def _dodge(self, state: _DodgeState, elapsed, interval, senders, sent, got) -> None:
        """Adopt the dodger's moves; ask it to move flows that lost packets in the last finished
        interval, and to sweep every idle flow when a detector has named something new. A flow the
        dodger was moving when something new was named is swept once its move lands: the move was
        planned on what had been named before, and may have taken it onto the new suspect (CI's
        hash-dodge drill: a flow moved, by its own loss, onto the link named meanwhile stayed there
        7.6 s, until its next loss)."""
        landed = []
        while not self.dodger.moves.empty():
            move = self.dodger.moves.get()
            if move.sock is not None:
                move.sock.setblocking(False)
                senders[move.flow].close()
                senders[move.flow] = move.sock
            state.pending.discard(move.flow)
            if move.flow in state.unswept:
                state.unswept.discard(move.flow)
                landed.append(move.flow)
            if move.settled:
                state.quiet_until[move.flow] = int(elapsed / interval) + 1  # packets already sent may still be lost
        swept = landed
        if self.dodger.named != state.named:
            state.named = self.dodger.named
            state.unswept |= state.pending
            swept = [flow for flow in range(len(self.pairs)) if flow not in state.pending]
        if swept:
            state.pending.update(swept)
            self.dodger.sweep([Request(flow, self.label(flow), *self.pairs[flow], senders[flow]) for flow in swept])
        while (state.checked + 1) * interval + DODGE_WAIT_S < elapsed:
            bucket = state.checked
            state.checked += 1
            for flow, (src, dst) in enumerate(self.pairs):
                if flow in state.pending or bucket < state.quiet_until[flow]:
                    continue
                if got.get((flow, bucket), 0) < sent.get((flow, bucket), 0):
                    state.pending.add(flow)
                    self.dodger.request(Request(flow, self.label(flow), src, dst, senders[flow]))


class _DodgeState:
    def __init__(self, flows: int, first: int):
        self.checked = first  # next interval to look at
        self.pending: set[int] = set()  # flows the dodger is working on
        self.quiet_until = [0] * flows  # first interval whose loss counts again, per flow
        self.named = 0  # the dodger's `named` when the flows were last swept
        self.unswept: set[int] = set()  # flows being moved at that sweep: swept when their move lands
