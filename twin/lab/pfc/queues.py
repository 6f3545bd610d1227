"""The kernel side of PFC: the maps, an enqueue/dequeue program pair per node that has queues (each
attached to all of the node's ports with cls_bpf, direct action, on a clsact qdisc), and the
queues read back.

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
PROGRAM_NAMES = {CLSACT_EGRESS: "ftw_enq", CLSACT_INGRESS: "ftw_deq"}
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
        # (node id, ifindex) -> queue id, per hook; filled by attach() once it knows the indexes
        self.node_ids = {name: i for i, name in enumerate(sorted({n for q in self.queues
                                                                   for n in (q.port.node, q.peer.node)}))}
        self.enqueue_ports_fd = bpf.create_map(bpf.MAP_HASH, programs.PORT_KEY.size, programs.QUEUE_ID.size,
                                               max(1, len(self.queues)), "ftw_pfc_enq_ports")
        self.dequeue_ports_fd = bpf.create_map(bpf.MAP_HASH, programs.PORT_KEY.size, programs.QUEUE_ID.size,
                                               max(1, len(self.queues)), "ftw_pfc_deq_ports")
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
        """Load a node's program pair and attach it to its ports; replaces what an earlier
        controller left. The tc requests are encoded once (nlbatch): pyroute2's encoding of 9,000
        of them was most of pod128's controller start."""
        by_node: dict[str, list[tuple[str, str, int]]] = {}  # node -> (ifname, hook, queue id)
        for queue in self.queues:
            by_node.setdefault(queue.port.node, []).append((queue.port.ifname, CLSACT_EGRESS, queue.id))
            by_node.setdefault(queue.peer.node, []).append((queue.peer.ifname, CLSACT_INGRESS, queue.id))
        for node, hooks in by_node.items():
            index = self.indexes[node] = interface_indexes(self.lab.netns(node))
            node_id = self.node_ids[node]
            for ifname, hook, queue_id in hooks:  # before the programs see a packet
                bpf.update(self.enqueue_ports_fd if hook == CLSACT_EGRESS else self.dequeue_ports_fd,
                           programs.port_key(node_id, index[ifname]), programs.QUEUE_ID.pack(queue_id))
            fds = {}
            try:
                for hook in sorted({h[1] for h in hooks}):
                    fds[hook] = self._load(hook, node_id)
                with nlbatch.Sender(self.lab.netns(node), node) as sender:
                    for ifname in sorted({h[0] for h in hooks}):
                        sender.add(_requests("del"), index[ifname], f"removing {ifname}'s clsact", NO_QDISC)
                        sender.add(_requests("add"), index[ifname], f"clsact on {ifname}")
                    for ifname, hook, _queue_id in hooks:
                        name = PROGRAM_NAMES[hook]
                        sender.add([nlbatch.patch(m, FD_SENTINEL, fds[hook]) for m in _filter_requests(hook, name)],
                                   index[ifname], f"{name} program on {ifname}")
                    sender.flush()
            finally:
                for fd in fds.values():  # the filters hold the programs
                    os.close(fd)

    def _load(self, hook: str, node_id: int) -> int:
        if hook == CLSACT_EGRESS:
            code = programs.enqueue(node_id, self.enqueue_ports_fd, self.state_fd, self.contrib_fd, self.events_fd)
        else:
            code = programs.dequeue(node_id, self.dequeue_ports_fd, self.state_fd, self.events_fd)
        return bpf.load_program(bpf.PROG_SCHED_CLS, code, PROGRAM_NAMES[hook])

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
        for fd in (self.state_fd, self.contrib_fd, self.events_fd, self.enqueue_ports_fd, self.dequeue_ports_fd):
            os.close(fd)
