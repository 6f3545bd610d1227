"""The two eBPF programs that measure every PFC-managed egress queue in the kernel, per packet.

A port's queue is the bytes that entered its egress (counted by ENQUEUE on the port's clsact
egress hook, before the qdisc) and have not yet arrived at the far end of the link (counted off
by DEQUEUE on the peer interface's clsact ingress hook). That is the qdisc's backlog plus the
few packets on the wire, with no polling. Crossing the thresholds emits an event on a ring buffer
that the controller (pfc/controller.py) waits on:

    XOFF(port, ingress ifindex, generation)  the queue is above xoff, and a packet from this
                                             ingress port arrived into it: pause that sender
                                             (once per ingress port and generation)
    XON(port, generation)                    the queue fell below xon: resume its senders

So a pause goes exactly to the upstream ports whose traffic fills the queue (an ingress-attributed
PFC, as switches account their buffer per ingress port), and only queues that cross a threshold
cost anything.

A node loads each program once and attaches it to all its ports: the packet's interface finds its
queue in a map keyed by (node id, ifindex), one map per hook (a switch port is the ENQUEUE point
of its own queue and the DEQUEUE point of its peer's). Interface indexes are per namespace, hence
the node id, which is the one constant a node's program carries. (One program per queue, with the
queue id built in, took 9,216 loads at pod128.)

Assertion and generation are one 64-bit word, `phase`: odd while the queue is above XOFF, and
every change is a compare-and-exchange that moves it up by one. An XOFF event carries the odd
phase it belongs to, an XON the odd phase it ended, so the controller can tell an XOFF that lost a
race with the XON of its own phase (stale, ignored) from one of a new phase. Equivalent C:

    ENQUEUE: PORT = enqueue_ports[NODE << 32 | skb->ifindex] (none: return TC_ACT_OK);
             s = &state[PORT]; occ = atomic_fetch_add(&s->occ, skb->len) + skb->len;
             if (occ > s->peak) s->peak = occ;
             if (!s->xoff || occ <= s->xoff) return TC_ACT_OK;
             p = s->phase; if (!(p & 1) && cmpxchg(&s->phase, p, p + 1) == p) p++;
             p = s->phase; if (!(p & 1) || !skb->ingress_ifindex) return TC_ACT_OK;
             if (contrib[PORT, ingress] != p) { contrib[PORT, ingress] = p;
                                                 ringbuf_output({PORT, ingress, XOFF, p, now}); }
    DEQUEUE: PORT = dequeue_ports[NODE << 32 | skb->ifindex] (none: return TC_ACT_OK);
             s = &state[PORT]; occ = atomic_fetch_add(&s->occ, -skb->len) - skb->len;
             p = s->phase; if (occ < s->xon && (p & 1) && cmpxchg(&s->phase, p, p + 1) == p)
                 ringbuf_output({PORT, 0, XON, p, now});
"""

from __future__ import annotations

import struct

from twin.lab.ebpf import asm
from twin.lab.ebpf.asm import R0, R1, R2, R3, R4, R6, R7, R8, R9, R10, Label
from twin.lab.ebpf.syscall import KTIME_GET_NS, MAP_LOOKUP, MAP_UPDATE, RINGBUF_OUTPUT

# state[port]: one 32-byte value per port in an mmap-able array.
STATE = struct.Struct("<qQIIII")  # occ, phase, xoff, xon, peak, events the ring had no room for
OCC, PHASE, XOFF_AT, XON_AT, PEAK, LOST = 0, 8, 16, 20, 24, 28
EVENT = struct.Struct("<IIIIQQ")  # port, ingress ifindex, kind, pad, phase, kernel time (ns)
XOFF, XON = 1, 2
SKB_LEN, SKB_INGRESS_IFINDEX, SKB_IFINDEX = 0, 36, 40  # offsets in struct __sk_buff
TC_ACT_OK = 0
PORT_KEY = struct.Struct("<II")  # a ports map key as the program builds it: ifindex | node << 32
QUEUE_ID = struct.Struct("<I")
PORT_AT = -56  # where the program keeps the packet's queue id on its stack


def port_key(node_id: int, ifindex: int) -> bytes:
    return PORT_KEY.pack(ifindex, node_id)


def _find_queue(ports_fd: int, node_id: int) -> list:
    """The queue id of the packet's interface to R10+PORT_AT, or leave through `out` (a port
    without a queue, e.g. a host's)."""
    return [asm.load(R1, R6, SKB_IFINDEX, 4), asm.mov(R2, imm=node_id), asm.alu("<<", R2, imm=32),
            asm.alu("|", R1, R2), asm.store(R10, -64, R1, 8),
            asm.load_map(R1, ports_fd), asm.mov(R2, R10), asm.alu("+", R2, imm=-64), asm.call(MAP_LOOKUP),
            asm.jump("==", R0, "out"), asm.load(R1, R0, 0, 4), asm.store(R10, PORT_AT, R1, 4)]


def _lookup_state(state_fd: int) -> list:
    """R8 = &state[queue id], or leave through `out`."""
    return [asm.mov(R2, R10), asm.alu("+", R2, imm=PORT_AT),
            asm.load_map(R1, state_fd), asm.call(MAP_LOOKUP), asm.jump("==", R0, "out"), asm.mov(R8, R0)]


def _emit(events_fd: int, ifindex_reg: int | None, kind: int, phase_reg: int) -> list:
    """ringbuf_output({port, ingress, kind, 0, phase, now}); the event is built at R10-48
    (the controller measures its reaction from the kernel time in it)."""
    ingress = [asm.store(R10, -44, ifindex_reg, 4)] if ifindex_reg is not None else [asm.store_imm(R10, -44, 0, 4)]
    return [asm.load(R1, R10, PORT_AT, 4), asm.store(R10, -48, R1, 4), *ingress, asm.store_imm(R10, -40, kind, 4),
            asm.store_imm(R10, -36, 0, 4), asm.store(R10, -32, phase_reg, 8),
            asm.call(KTIME_GET_NS), asm.store(R10, -24, R0, 8),
            asm.load_map(R1, events_fd), asm.mov(R2, R10), asm.alu("+", R2, imm=-48),
            asm.mov(R3, imm=EVENT.size), asm.mov(R4, imm=0), asm.call(RINGBUF_OUTPUT),
            asm.jump("==", R0, "out"), asm.mov(R1, imm=1), asm.fetch_add(R8, LOST, R1, 4)]


def enqueue(node_id: int, ports_fd: int, state_fd: int, contrib_fd: int, events_fd: int) -> bytes:
    """clsact egress of a node's ports: count the packet into the queue; XOFF above the threshold."""
    return asm.assemble([
        asm.mov(R6, R1), asm.load(R7, R6, SKB_LEN, 4),
        *_find_queue(ports_fd, node_id), *_lookup_state(state_fd),
        asm.mov(R1, R7), asm.fetch_add(R8, OCC, R1), asm.alu("+", R1, R7),  # R1 = occupancy
        asm.load(R2, R8, PEAK, 4), asm.jump("s<=", R1, "no_peak", R2), asm.store(R8, PEAK, R1, 4),
        Label("no_peak"),
        asm.load(R2, R8, XOFF_AT, 4), asm.jump("==", R2, "out"), asm.jump("s<=", R1, "out", R2),
        asm.load(R0, R8, PHASE, 8), asm.mov(R1, R0), asm.alu("&", R1, imm=1), asm.jump("!=", R1, "asserted"),
        asm.mov(R1, R0), asm.alu("+", R1, imm=1), asm.cmpxchg(R8, PHASE, R1, 8),  # even -> odd: XOFF
        Label("asserted"),
        asm.load(R9, R8, PHASE, 8), asm.mov(R1, R9), asm.alu("&", R1, imm=1), asm.jump("==", R1, "out"),
        asm.store(R10, -24, R9, 8),  # the phase, as the contributor's mark and the event's
        asm.load(R9, R6, SKB_INGRESS_IFINDEX, 4), asm.jump("==", R9, "out"),  # sent by the switch itself
        asm.load(R1, R10, PORT_AT, 4), asm.alu("<<", R1, imm=32), asm.alu("|", R1, R9),
        asm.store(R10, -16, R1, 8),
        asm.load_map(R1, contrib_fd), asm.mov(R2, R10), asm.alu("+", R2, imm=-16), asm.call(MAP_LOOKUP),
        asm.jump("==", R0, "notify"),
        asm.load(R1, R0, 0, 8), asm.load(R2, R10, -24, 8), asm.jump("==", R1, "out", R2),  # told already
        Label("notify"),
        asm.load_map(R1, contrib_fd), asm.mov(R2, R10), asm.alu("+", R2, imm=-16),
        asm.mov(R3, R10), asm.alu("+", R3, imm=-24), asm.mov(R4, imm=0), asm.call(MAP_UPDATE),
        asm.load(R7, R10, -24, 8),
        *_emit(events_fd, R9, XOFF, R7),
        Label("out"), asm.mov(R0, imm=TC_ACT_OK), asm.exit_(),
    ])


def dequeue(node_id: int, ports_fd: int, state_fd: int, events_fd: int) -> bytes:
    """clsact ingress of the ports' peers on a node: the packet has left the queue; XON below the
    threshold."""
    return asm.assemble([
        asm.mov(R6, R1), asm.load(R7, R6, SKB_LEN, 4),
        *_find_queue(ports_fd, node_id), *_lookup_state(state_fd),
        asm.mov(R1, R7), asm.alu("neg", R1), asm.fetch_add(R8, OCC, R1), asm.alu("-", R1, R7),
        asm.load(R2, R8, XON_AT, 4), asm.jump("s>=", R1, "out", R2),
        asm.load(R0, R8, PHASE, 8), asm.mov(R9, R0), asm.alu("&", R9, imm=1), asm.jump("==", R9, "out"),
        asm.mov(R9, R0), asm.mov(R1, R0), asm.alu("+", R1, imm=1), asm.cmpxchg(R8, PHASE, R1, 8),
        asm.jump("!=", R0, "out", R9),  # another CPU moved the phase first
        *_emit(events_fd, None, XON, R9),
        Label("out"), asm.mov(R0, imm=TC_ACT_OK), asm.exit_(),
    ])
