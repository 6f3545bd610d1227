"""The kernel side of the lab's queues (PFC and ECN): the compiled programs (ebpf/queues.bpf.c),
loaded once per lab with libbpf and attached to every switch port and its peer with cls_bpf
(direct action, on a clsact qdisc whose hooks are the node's shared blocks: one filter per node and
hook, nlbatch.SHARED_BLOCKS), and the queues read back and tuned.

Queue ids index the `queues` array; the array is mmap-ed (BPF_F_MMAPABLE), so reading every
queue's occupancy, or setting its thresholds, costs no system call. A packet finds its queue by
its namespace's cookie and its interface, so one load serves every node (one load per node and
hook took 448 loads at pod128; one per port, 9,216). The programs and maps live as long as the tc
filters that hold them, i.e. until the lab's namespaces go; nothing is pinned in bpffs.
"""

from __future__ import annotations

import errno
import mmap
import socket
import struct
from dataclasses import dataclass

from twin.lab.ebpf import layout
from twin.lab.ebpf.libbpf import BpfObject, update
from twin.lab.ebpf.ringbuf import RingBuffer
from twin.lab.handle import Lab
from twin.lab.kernel import nlbatch
from twin.lab.kernel.nsutil import interface_indexes, socket_in
from twin.model import balance, pathhash
from twin.model.buffers import Thresholds, for_port
from twin.model.ports import Port, peer, ports

CLSACT_INGRESS, CLSACT_EGRESS = nlbatch.CLSACT_INGRESS, nlbatch.CLSACT_EGRESS
CLSACT_PARENTS = {CLSACT_INGRESS: 0xFFFFFFF2, CLSACT_EGRESS: 0xFFFFFFF3}  # the same hooks as tcm_parent
PROGRAMS = {CLSACT_EGRESS: "enqueue", CLSACT_INGRESS: "dequeue"}  # the programs' names in the object
PORT_MAPS = {CLSACT_EGRESS: "enqueue_ports", CLSACT_INGRESS: "dequeue_ports"}

NO_QDISC = frozenset({errno.ENOENT, errno.EINVAL})  # deleting a clsact that is not there
# Adaptive routing weighs the kernel's uplink against this many drawn at random: two random
# choices balance load nearly as well as weighing every uplink (Mitzenmacher), at two map reads.
BALANCE_CHOICES = 2


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
        count = len(self.queues)
        self.bpf = BpfObject(layout.OBJECT, max_entries={"queues": count, "enqueue_ports": count,
                                                         "dequeue_ports": count,
                                                         "groups": len(self.by_port)})
        size = max(mmap.PAGESIZE, -(-count * layout.QUEUE.size // mmap.PAGESIZE) * mmap.PAGESIZE)
        self._state = mmap.mmap(self.bpf.map_fd("queues"), size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.events_fd = self.bpf.map_fd("events")
        self.events = RingBuffer(self.events_fd, self.bpf.max_entries("events"))
        for queue in self.queues:
            self.set_thresholds(queue.id, queue.thresholds.xoff if fabric.pfc else 0, queue.thresholds.xon)
            if fabric.pfc:  # a lossy queue drops at its buffer: nothing above it to count
                struct.pack_into("<I", self._state, self._field(queue.id, "buffer"), queue.thresholds.buffer)
            if fabric.ecn:
                self.set_marking(queue.id, queue.thresholds.kmin, queue.thresholds.kmax, queue.thresholds.pmax)
        update(self.bpf.map_fd("balance"), layout.QUEUE_ID.pack(0), layout.BALANCE.pack(
            layout.BALANCE_MODES[fabric.load_balance], BALANCE_CHOICES, round(balance.flowlet_gap_s(fabric) * 1e9),
            int(fabric.hash_offset), 0))

    # --- thresholds and occupancy (shared memory with the programs) ---------------------------
    def _field(self, queue_id: int, name: str) -> int:
        return queue_id * layout.QUEUE.size + layout.OFFSET[name]

    def set_thresholds(self, queue_id: int, xoff: int, xon: int) -> None:
        """xoff 0: the queue never pauses its senders (it fills and drops at its buffer)."""
        struct.pack_into("<II", self._state, self._field(queue_id, "xoff"), xoff, xon)

    def thresholds(self, queue_id: int) -> tuple[int, int]:
        return struct.unpack_from("<II", self._state, self._field(queue_id, "xoff"))

    def set_marking(self, queue_id: int, kmin: int, kmax: int, pmax: float) -> None:
        """ECN marking between kmin and kmax bytes (kmin 0: off); pmax, the probability at kmax."""
        struct.pack_into("<III", self._state, self._field(queue_id, "kmin"), kmin, kmax,
                         round(pmax * layout.PROBABILITY_ONE))

    def marking(self, queue_id: int) -> tuple[int, int, float]:
        kmin, kmax, pmax = struct.unpack_from("<III", self._state, self._field(queue_id, "kmin"))
        return kmin, kmax, pmax / layout.PROBABILITY_ONE

    def read(self, queue_id: int) -> tuple[int, int, int]:
        """(occupancy bytes, phase (odd: above XOFF), peak bytes)"""
        values, at = layout.QUEUE.unpack_from(self._state, queue_id * layout.QUEUE.size), layout.INDEX
        return values[at["occ"]] - values[at["discount"]], values[at["phase"]], values[at["peak"]]

    def steered(self, queue_id: int) -> tuple[int, int]:
        """Adaptive routing: (packets moved onto this port, packets moved off it)."""
        return struct.unpack_from("<QQ", self._state, self._field(queue_id, "steered_in"))

    def marked(self, queue_id: int) -> int:
        """Packets the queue marked Congestion Experienced."""
        return struct.unpack_from("<Q", self._state, self._field(queue_id, "marked"))[0]

    def late(self, queue_id: int) -> int:
        """Packets that entered the queue above its modelled buffer, held while a pause was late."""
        return struct.unpack_from("<Q", self._state, self._field(queue_id, "late"))[0]

    def total_counted(self) -> int:
        """Every queue's marks and packets moved in, summed: what the programs count without
        an event (one pass over the shared array: 4,608 queues in ~1 ms)."""
        view = memoryview(self._state)[:len(self.queues) * layout.QUEUE.size]
        marked, moved = layout.INDEX["marked"], layout.INDEX["steered_in"]
        return sum(values[marked] + values[moved] for values in layout.QUEUE.iter_unpack(view))

    def lost_events(self) -> int:
        """Events the ring refused the programs (full, or its lock not taken): the controller
        missed them (a refused XOFF is tried again by the sender's next packet)."""
        return sum(struct.unpack_from("<I", self._state, self._field(q.id, "lost"))[0] for q in self.queues)

    def discount(self, queue_id: int, drift: int) -> int:
        """Take `drift` bytes off a queue's count (drops the programs never saw: a link that went
        down, an overflow; negative: give back what an earlier correction took from packets still
        on the wire); if that leaves it below XON, end its XOFF phase. Returns the phase
        ended (0: none). The correction goes into `discount`, which only this process writes: the
        programs' atomic adds to the count are never lost to it. (Ending the phase is not atomic
        against a program moving it at the same moment; the next check mends that.)"""
        discount = struct.unpack_from("<q", self._state, self._field(queue_id, "discount"))[0] + drift
        struct.pack_into("<q", self._state, self._field(queue_id, "discount"), discount)
        occ = self.read(queue_id)[0]
        phase = struct.unpack_from("<Q", self._state, self._field(queue_id, "phase"))[0]
        if phase & 1 and occ < self.thresholds(queue_id)[1]:
            struct.pack_into("<Q", self._state, self._field(queue_id, "phase"), phase + 1)
            return phase
        return 0

    # --- programs --------------------------------------------------------------------------
    def attach(self) -> None:
        """Tell the programs every port (its namespace's cookie and ifindex) and attach them to its
        node's shared blocks; replaces what an earlier controller left. The tc requests are encoded once (nlbatch):
        pyroute2's encoding of 9,000 of them was most of pod128's controller start."""
        by_node: dict[str, list[tuple[str, str, int | None]]] = {}  # node -> (ifname, hook, queue id)
        for queue in self.queues:
            by_node.setdefault(queue.port.node, []).append((queue.port.ifname, CLSACT_EGRESS, queue.id))
            by_node.setdefault(queue.peer.node, []).append((queue.peer.ifname, CLSACT_INGRESS, queue.id))
        # A port with a clsact qdisc but no ingress program (a leaf's port toward a host: hosts have
        # no queue) gets `dequeue` anyway, which finds no queue there: with a clsact qdisc the kernel
        # counts every frame no protocol takes (LLDP) as a receive drop unless a program ends it.
        for hooks in by_node.values():
            with_ingress = {ifname for ifname, hook, _queue_id in hooks if hook == CLSACT_INGRESS}
            hooks += [(ifname, CLSACT_INGRESS, None) for ifname, hook, _queue_id in list(hooks)
                      if hook == CLSACT_EGRESS and ifname not in with_ingress]
        fds = {hook: self.bpf.program_fd(name) for hook, name in PROGRAMS.items()}
        port_maps = {hook: self.bpf.map_fd(name) for hook, name in PORT_MAPS.items()}
        groups_map, groups = self.bpf.map_fd("groups"), balance.ecmp_groups(self.fabric)
        for node, hooks in by_node.items():
            netns = self.lab.netns(node)
            index = self.indexes[node] = interface_indexes(netns)
            cookie = netns_cookie(netns)
            for ifname, hook, queue_id in hooks:  # before the programs see a packet
                if queue_id is not None:
                    update(port_maps[hook], layout.port_key(cookie, index[ifname]), layout.QUEUE_ID.pack(queue_id))
            for group in groups.get(node, ()):
                members = [(index[p.ifname], self.by_port[p].id) for p in group]
                for ifindex, _queue_id in members:
                    update(groups_map, layout.port_key(cookie, ifindex),
                           layout.ecmp_group(members, pathhash.seed(self.fabric, node)))
            with nlbatch.Sender(netns, node) as sender:
                for ifname in sorted({h[0] for h in hooks}):
                    sender.add(nlbatch.clsact("del"), index[ifname], f"removing {ifname}'s clsact", NO_QDISC)
                    sender.add(nlbatch.clsact(), index[ifname], f"clsact on {ifname}")
                for hook in sorted({h[1] for h in hooks}):  # once: the node's ports share the hook's block
                    name = PROGRAMS[hook]
                    sender.add_node_program(hook, name, fds[hook], f"{name} program on {node}'s ports")
                sender.flush()

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
        self.bpf.close()


def netns_cookie(netns: str) -> int:
    """The cookie the kernel gives a network namespace (what bpf_get_netns_cookie returns)."""
    with socket_in(netns, socket.SOCK_DGRAM) as sock:
        return layout.netns_cookie(sock)
