"""XOFF, XON and buffer of every switch port, from the lab file or derived from the line rate.

Everything here is time at line rate, the unit the twin scales (200 Mbit/s stands for 400 Gbit/s:
a 2 ms queue here is a 1 us queue there, 2000 times faster).

- XOFF: 4 ms of line rate, and at least 4 frames, so one jumbo frame never pauses a port.
  (At 200 Mbit/s: 100 KB, the order of a real switch's per-port XOFF in bytes.)
- XON: half of XOFF, at least 2 frames below it. What is left in the queue at XON keeps the link
  busy while the resumed senders' traffic arrives (2 ms covers the controller's reaction to the
  99th percentile); the gap to XOFF sets how often a congested queue pauses and resumes its
  senders (each cycle costs the controller events: a 2 ms gap, about 250 cycles a second).
- Headroom: what the senders put in after the queue crossed XOFF, until their gates close. A
  real switch reserves cable delay plus pause reaction per ingress port; here the reaction is
  the controller's (woken by the kernel, a netlink message per sender): 0.1 ms typically, 3 ms
  at the 99th percentile and 6-7 ms at worst with a busy all-ranks allreduce on rail4
  (docs/benchmarks.md): budgeted at REACTION_MS for every port that can feed the queue, plus
  two frames each already on their way.
- Buffer: XOFF + headroom, per port (a port with more feeders gets more). With `pfc: false` the
  same buffer simply drops when full, so the two modes differ only in PFC.
- Late allowance: the qdisc of a lossless port holds LATE_MS of line rate per feeder above its
  buffer (at most LATE_CAP_BYTES). A real switch's pause takes hold within microseconds, inside
  its headroom; the emulated one waits for a process, and a process can wait for the kernel's
  routing lock (RTNL) behind a normal-priority holder that the busy machine does not run: the
  controller's gate message waited 235 ms with three CPU hogs beside interface churn
  (docs/benchmarks.md). What arrives in that time is the emulator's lateness, not the fabric's
  behaviour: it is held, not dropped, and counted (`late` per port, the programs' count of packets
  that entered a queue above its buffer). A lossy queue (`pfc: false`) drops at its buffer.
Host NICs hold HOST_QUEUE_BYTES: a paused NIC keeps what its host sends (the host's sockets block
long before), as a real NIC's host memory does.

ECN marking (RED-like, as switch ASICs mark for DCQCN), below XOFF so that senders slow down
before a queue pauses them:
- Kmin: 0.5 ms of line rate, at least 3 frames: a queue of a frame or two is two senders' packets
  meeting for an instant, not congestion (27 KB at MTU 9000; 0.5 ms is 12.5 KB at 200 Mbit/s).
  At 2 frames, a RoCE allreduce on rail4 at 100 Mbit/s ran at 0.29 of line with DCQCN, at 3
  frames 0.45 (docs/benchmarks.md): every transient meeting cost a rate cut.
- Kmax: 2 ms of line rate, half of XOFF, at least Kmin + 2 frames and at most XOFF - half a frame:
  the queue is marked hard well before it pauses anyone (50 KB at 200 Mbit/s, XOFF 100 KB; 45 KB
  at 100 Mbit/s, XOFF 50 KB).
- Pmax 0.1: at 200 Mbit/s a sender at line rate puts about 28 jumbo frames into one DCQCN CNP
  interval (10 ms here, roce/dcqcn.py); a 10 % chance near Kmax gives it a few marks in each, so
  it hears of a building queue in about one interval, and a queue above Kmax marks every packet.
The DCQCN paper's 40 Gbit/s values (Kmin 5 KB, Kmax 200 KB, Pmax 1 %) would sit above the twin's
XOFF: its queues are bytes at a line rate 200 times lower, so marking follows XOFF, not the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.model.fabric import Fabric
from twin.model.ports import Port, feeders

XOFF_MS = 4.0
ECN_KMIN_MS = 0.5
ECN_KMAX_MS = 2.0
MIN_ECN_FRAMES = 3  # Kmin
ECN_BAND_FRAMES = 2  # Kmax - Kmin, at least
ECN_PMAX = 0.1
MIN_XOFF_FRAMES = 4
MIN_HYSTERESIS_FRAMES = 2
REACTION_MS = 10.0
IN_FLIGHT_FRAMES = 2
ETHERNET_HEADER = 14
HOST_QUEUE_BYTES = 64 * 1024 * 1024
LATE_MS = 1000.0
LATE_CAP_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Thresholds:
    xoff: int  # bytes
    xon: int
    buffer: int
    kmin: int = 0  # ECN marking between kmin and kmax bytes (0: off)
    kmax: int = 0
    pmax: float = 0.0

    @property
    def headroom(self) -> int:
        return self.buffer - self.xoff


def frame_bytes(mtu: int) -> int:
    return mtu + ETHERNET_HEADER


def line_bytes(rate_bps: int, ms: float) -> int:
    return int(rate_bps / 8 * ms / 1000)


def default_xoff(rate_bps: int, mtu: int) -> int:
    return max(line_bytes(rate_bps, XOFF_MS), MIN_XOFF_FRAMES * frame_bytes(mtu))


def default_xon(xoff: int, mtu: int) -> int:
    return max(0, min(xoff // 2, xoff - MIN_HYSTERESIS_FRAMES * frame_bytes(mtu)))


def headroom(rate_bps: int, mtu: int, senders: int) -> int:
    return senders * (line_bytes(rate_bps, REACTION_MS) + IN_FLIGHT_FRAMES * frame_bytes(mtu))


def lab_xoff(fabric: Fabric) -> int:
    return fabric.pfc_xoff_bytes or default_xoff(fabric.rate_bps, fabric.mtu)


def lab_marking(fabric: Fabric) -> tuple[int, int, float]:
    """(kmin, kmax, pmax) of every switch queue, lab settings over the derived defaults; (0, 0, 0)
    without marking."""
    if not fabric.ecn:
        return 0, 0, 0.0
    frame, xoff = frame_bytes(fabric.mtu), lab_xoff(fabric)
    kmin = fabric.ecn_kmin_bytes or max(line_bytes(fabric.rate_bps, ECN_KMIN_MS), MIN_ECN_FRAMES * frame)
    kmax = fabric.ecn_kmax_bytes or min(max(line_bytes(fabric.rate_bps, ECN_KMAX_MS), kmin + ECN_BAND_FRAMES * frame),
                                        max(kmin + frame, xoff - frame // 2))
    return kmin, kmax, fabric.ecn_pmax if fabric.ecn_pmax is not None else ECN_PMAX


def for_port(fabric: Fabric, port: Port) -> Thresholds:
    """A switch port's thresholds (lab settings win over the derived defaults; `setting_problems`
    refused the ones no port could honour, so none is rewritten here)."""
    xoff = lab_xoff(fabric)
    xon = fabric.pfc_xon_bytes if fabric.pfc_xon_bytes is not None else default_xon(xoff, fabric.mtu)
    senders = len(feeders(fabric, port.node, port.ifname))
    buffer = fabric.buffer_bytes or xoff + headroom(fabric.rate_bps, fabric.mtu, max(1, senders))
    kmin, kmax, pmax = lab_marking(fabric)
    return Thresholds(xoff=xoff, xon=xon, buffer=buffer, kmin=kmin, kmax=kmax, pmax=pmax)


def setting_problems(fabric: Fabric) -> list[tuple[str, str, str]]:
    """(key, message, hint) for lab settings no port can honour as written. A setting is honoured
    or refused, never adjusted: `buffer: 2KB` once became 109 KB, `pfc_xon: 500MB` 99 KB."""
    frame, found = frame_bytes(fabric.mtu), []
    xoff = lab_xoff(fabric)
    if fabric.pfc_xoff_bytes is not None and fabric.pfc_xoff_bytes < MIN_XOFF_FRAMES * frame:
        found.append(("pfc_xoff", f"pfc_xoff ({fabric.pfc_xoff_bytes} B) is below {MIN_XOFF_FRAMES} frames of "
                      f"{frame} B at MTU {fabric.mtu}: one frame would pause the port, and XON has no room below it",
                      f"at least {MIN_XOFF_FRAMES * frame} B, or omit it (4 ms of line rate)"))
    elif fabric.pfc_xon_bytes is not None and fabric.pfc_xon_bytes >= xoff:
        found.append(("pfc_xon", f"pfc_xon ({fabric.pfc_xon_bytes} B) must be below XOFF ({xoff} B"
                      + (")" if fabric.pfc_xoff_bytes else ", 4 ms of line rate by default)"),
                      "resume below the pause threshold, e.g. half of it"))
    if fabric.buffer_bytes is not None:
        floor = xoff + frame if fabric.pfc else frame
        if fabric.buffer_bytes < floor:
            found.append(("buffer", f"buffer ({fabric.buffer_bytes} B) is below "
                          + (f"XOFF ({xoff} B) plus one frame ({frame} B): a paused port could not hold what"
                             " arrives while the pause takes hold" if fabric.pfc else
                             f"one frame ({frame} B at MTU {fabric.mtu}): every full-size frame would drop"),
                          f"at least {floor} B, or omit it (XOFF plus headroom per port)"))
    if fabric.ecn:
        kmin, kmax, _pmax = lab_marking(fabric)
        if kmin >= kmax:
            key = "ecn_kmax" if fabric.ecn_kmax_bytes is not None else "ecn_kmin"
            found.append((key, f"ecn_kmin ({kmin} B) must be below ecn_kmax ({kmax} B"
                          + (")" if fabric.ecn_kmax_bytes and fabric.ecn_kmin_bytes else ", derived)"),
                          "marking rises from kmin to kmax: give both, kmin the lower"))
    return found


def late_allowance(fabric: Fabric, port: Port) -> int:
    """Bytes a lossless switch port's qdisc holds above its buffer, for pauses the emulator sent late."""
    senders = max(1, len(feeders(fabric, port.node, port.ifname)))
    return min(senders * line_bytes(fabric.rate_bps, LATE_MS), LATE_CAP_BYTES)


def queue_limit(fabric: Fabric, port: Port) -> int:
    """Bytes the port's egress queue holds before it drops (its TBF's limit): a host NIC's memory,
    a lossy switch port's buffer, a lossless one's buffer and late allowance."""
    if not fabric.nodes[port.node].is_switch:
        return HOST_QUEUE_BYTES
    return switch_queue_limit(fabric, port, for_port(fabric, port).buffer, lossless=fabric.pfc)


def port_shaping(fabric: Fabric, port: Port) -> tuple[int, int, int, bool]:
    """What a port's queue tree is made from (model/queue_tree.py `port_tree`): the line rate, the
    data queue's limit, the lab's MTU, and whether the port is a host's, which is its NIC (its
    control class carries a response for every data packet)."""
    return fabric.rate_bps, queue_limit(fabric, port), fabric.mtu, not fabric.nodes[port.node].is_switch


def switch_queue_limit(fabric: Fabric, port: Port, buffer: int, lossless: bool) -> int:
    """A switch port's qdisc limit for a queue of `buffer` bytes: a lossy queue drops at its buffer,
    a lossless one holds the late allowance above it (the controller's, when a fault changes class)."""
    return buffer + late_allowance(fabric, port) if lossless else buffer
