"""The kernel side of PFC: the maps, one enqueue/dequeue program pair per switch port, attached
with pyroute2 (cls_bpf, direct action, on a clsact qdisc), and the queues read back.

Port ids index the `state` array; the array is mmap-ed (BPF_F_MMAPABLE), so reading every queue's
occupancy costs no system call. The programs and maps live as long as the tc filters that hold
them, i.e. until the lab's namespaces go; nothing is pinned in bpffs.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from dataclasses import dataclass
from functools import lru_cache

from twin.lab import nlbatch
from twin.lab.ebpf import syscall as bpf
from twin.lab.ebpf.ringbuf import RingBuffer
from twin.lab.handle import Lab
from twin.lab.nsutil import interface_indexes
from twin.lab.pfc import programs
from twin.model.buffers import Thresholds, for_port
from twin.model.ports import Port, peer, ports

RINGBUF_BYTES = 1 << 20
CLSACT_INGRESS, CLSACT_EGRESS = "ffff:fff2", "ffff:fff3"
CONTRIB_ENTRIES = 1 << 16
FD_SENTINEL = 0x7EADBEEF  # where a program's fd goes in an encoded filter request
NO_QDISC = frozenset({errno.ENOENT, errno.EINVAL})  # deleting a clsact that is not there


@lru_cache(maxsize=None)
def _requests(command: str) -> list[bytes]:
    return nlbatch.encode(lambda batch: batch.tc(command, "clsact", 0))


@lru_cache(maxsize=None)
def _filter_requests(hook: str, name: str) -> list[bytes]:
    return nlbatch.encode(lambda batch: batch.tc("add-filter", "bpf", 0, ":1", fd=FD_SENTINEL, name=name,
                                                 parent=hook, classid=1, direct_action=True))


@dataclass
class Queue:
    id: int
    port: Port  # the egress whose queue this is (a switch port)
    peer: Port  # the far end, where packets leave the queue's count
    thresholds: Thresholds


class Queues:
    def __init__(self, lab: Lab):
        self.lab, self.fabric = lab, lab.fabric
        fabric = lab.fabric
        switch_ports = [p for p in ports(fabric) if fabric.nodes[p.node].is_switch]
        self.queues = [Queue(i, p, peer(fabric, p), for_port(fabric, p)) for i, p in enumerate(switch_ports)]
        self.by_port = {q.port: q for q in self.queues}
        self.indexes: dict[str, dict[str, int]] = {}  # node -> ifname -> index, read once by attach()
        self.state_fd = bpf.create_map(bpf.MAP_ARRAY, 4, programs.STATE.size, len(self.queues), "ftw_pfc_state",
                                       bpf.F_MMAPABLE)
        self.contrib_fd = bpf.create_map(bpf.MAP_HASH, 8, 8, CONTRIB_ENTRIES, "ftw_pfc_contrib")
        self.events_fd = bpf.create_map(bpf.MAP_RINGBUF, 0, 0, RINGBUF_BYTES, "ftw_pfc_events")
        size = max(mmap.PAGESIZE, -(-len(self.queues) * programs.STATE.size // mmap.PAGESIZE) * mmap.PAGESIZE)
        self._state = mmap.mmap(self.state_fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.events = RingBuffer(self.events_fd, RINGBUF_BYTES)
        for queue in self.queues:
            self.set_thresholds(queue.id, queue.thresholds.xoff, queue.thresholds.xon)

    # --- thresholds and occupancy (shared memory with the programs) ---------------------------
    def set_thresholds(self, queue_id: int, xoff: int, xon: int) -> None:
        """xoff 0: the queue never pauses its senders (it fills and drops at its buffer)."""
        struct.pack_into("<II", self._state, queue_id * programs.STATE.size + programs.XOFF_AT, xoff, xon)

    def thresholds(self, queue_id: int) -> tuple[int, int]:
        return struct.unpack_from("<II", self._state, queue_id * programs.STATE.size + programs.XOFF_AT)

    def read(self, queue_id: int) -> tuple[int, int, int]:
        """(occupancy bytes, phase (odd: above XOFF), peak bytes)"""
        occ, phase, _xoff, _xon, peak, _lost = programs.STATE.unpack_from(self._state, queue_id * programs.STATE.size)
        return occ, phase, peak

    def lost_events(self) -> int:
        """Events the programs could not put on the ring (full): the controller missed them."""
        return sum(programs.STATE.unpack_from(self._state, q.id * programs.STATE.size)[5] for q in self.queues)

    def discount(self, queue_id: int, drift: int) -> int:
        """Take `drift` bytes off a queue's count (drops the programs never saw: a link that went
        down, an overflow; negative: give back what an earlier correction took from packets still
        on the wire); if that leaves it below XON, end its XOFF phase. Returns the phase
        ended (0: none). Not atomic against the programs: a packet counted in between may be
        lost from the count, which the next check mends."""
        offset = queue_id * programs.STATE.size
        occ = struct.unpack_from("<q", self._state, offset + programs.OCC)[0] - drift
        struct.pack_into("<q", self._state, offset + programs.OCC, occ)
        phase = struct.unpack_from("<Q", self._state, offset + programs.PHASE)[0]
        if phase & 1 and occ < self.thresholds(queue_id)[1]:
            struct.pack_into("<Q", self._state, offset + programs.PHASE, phase + 1)
            return phase
        return 0

    # --- programs --------------------------------------------------------------------------
    def attach(self) -> None:
        """Load a program pair per queue and attach it; replaces what an earlier controller left.
        The tc requests are encoded once (nlbatch): pyroute2's encoding of 9,000 of them was most
        of pod128's controller start."""
        by_node: dict[str, list[tuple[str, str, bytes, str]]] = {}  # node -> (ifname, hook, code, name)
        for queue in self.queues:
            enqueue = programs.enqueue(queue.id, self.state_fd, self.contrib_fd, self.events_fd)
            dequeue = programs.dequeue(queue.id, self.state_fd, self.events_fd)
            by_node.setdefault(queue.port.node, []).append((queue.port.ifname, CLSACT_EGRESS, enqueue, "ftw_enq"))
            by_node.setdefault(queue.peer.node, []).append((queue.peer.ifname, CLSACT_INGRESS, dequeue, "ftw_deq"))
        for node, hooks in by_node.items():
            index = self.indexes[node] = interface_indexes(self.lab.netns(node))
            fds = []
            try:
                with nlbatch.Sender(self.lab.netns(node), node) as sender:
                    for ifname in sorted({h[0] for h in hooks}):
                        sender.add(_requests("del"), index[ifname], f"removing {ifname}'s clsact", NO_QDISC)
                        sender.add(_requests("add"), index[ifname], f"clsact on {ifname}")
                    for ifname, hook, code, name in hooks:
                        fds.append(bpf.load_program(bpf.PROG_SCHED_CLS, code, name))
                        sender.add([nlbatch.patch(m, FD_SENTINEL, fds[-1]) for m in _filter_requests(hook, name)],
                                   index[ifname], f"{name} program on {ifname}")
                    sender.flush()
            finally:
                for fd in fds:  # the filters hold the programs
                    os.close(fd)

    def ingress_index(self) -> dict[tuple[str, int], Port]:
        """(switch, ingress ifindex) -> the upstream port feeding that switch through it."""
        table = {}
        for node in self.fabric.switches:
            index = self.indexes.get(node.name) or interface_indexes(self.lab.netns(node.name))
            for link in self.fabric.links_of(node.name):
                upstream = link.peer(node.name)
                table[(node.name, index[link.endpoint(node.name).ifname])] = Port(upstream.node, upstream.ifname)
        return table

    def close(self) -> None:
        self.events.close()
        self._state.close()
        for fd in (self.state_fd, self.contrib_fd, self.events_fd):
            os.close(fd)
