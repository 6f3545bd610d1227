"""miswire: two of a host's NICs have their cables swapped at the leaves, the "8 NICs per server"
mistake of a rack cabled by hand or re-cabled during maintenance: NIC i is plugged into the leaf
port meant for NIC j and the other way round. Each NIC keeps its address, so it now faces a leaf
port of another rail's subnet: its ARP for its gateway goes unanswered and the frames its
neighbour cache still addresses reach a port with another MAC, so both NICs lose every packet
while their links stay up and routing sees nothing. The leaves' LLDP shows the host's NICs at
each other's ports.

Emulated on real frames by a wire element in the host (ebpf/wire.bpf.c): what one NIC sends leaves
by the other's cable, what arrives on one cable reaches the other NIC; every port keeps its name,
address, MAC and sockets, as a physical NIC does. The switch ports' queue programs still count
each frame on the queue it really crosses.
"""

from __future__ import annotations

import errno
from pathlib import Path

from pydantic import Field, field_validator
from pyroute2.netlink.exceptions import NetlinkError

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.ebpf.libbpf import BpfObject, update
from twin.lab.nsutil import interface_indexes
from twin.model.targets import TargetError, resolve_node

OBJECT = Path(__file__).resolve().parents[1] / "lab" / "ebpf" / "wire.bpf.o"
CLSACT_INGRESS, CLSACT_EGRESS = 0xFFFFFFF2, 0xFFFFFFF3
# cross_out runs before anything on the egress; cross_in after the queue program that counts a frame
# off its switch port's queue (attached without a priority: the kernel gives the first 49152).
PRIORITIES = {CLSACT_EGRESS: 1, CLSACT_INGRESS: 0xF000}
PROGRAMS = {CLSACT_EGRESS: "cross_out", CLSACT_INGRESS: "cross_in"}


class MiswireParams(Params):
    node: str = Field(description="the host whose cables are swapped")
    nics: list[str] = Field(description="its two NICs whose cables trade leaf ports, e.g. [nic1, nic2]")

    @field_validator("nics")
    @classmethod
    def _two_distinct(cls, nics: list[str]) -> list[str]:
        if len(nics) != 2 or nics[0] == nics[1]:
            raise ValueError("name two different NICs of the host, e.g. [nic1, nic2]")
        return nics


def host_nics(fabric, params) -> tuple[str, list[str]]:
    """The host and its two NICs, each checked against the model."""
    host = resolve_node(fabric, params.node, roles=("host",))
    own = [link.endpoint(host).ifname for link in fabric.links_of(host)]
    for nic in params.nics:
        if nic not in own:
            raise TargetError(f"{host} has no NIC '{nic}'", hint="NICs: " + ", ".join(own), key="nics")
    return host, list(params.nics)


class Miswire(OnNode):
    name = "miswire"
    params = MiswireParams
    training_level = 4
    roles = ("host",)

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        hosts = sorted({n for n, _e in fabric.host_nics()})
        host = rng.choice(hosts)
        nics = sorted(link.endpoint(host).ifname for link in fabric.links_of(host))
        return {"node": host, "nics": sorted(rng.sample(nics, 2))}

    def trainable(self, fabric) -> bool:
        return fabric.rails >= 2

    def targets(self, fabric, params):
        host_nics(fabric, params)
        return super().targets(fabric, params)

    def check(self, fabric, params, lasts_s):
        if fabric.rails < 2:
            return [("nics", f"lab {fabric.name} has one NIC per host: there is no second cable to swap with",
                     "run it on a lab with rails: 2 or more")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        host, nics = host_nics(ctx.lab.fabric, params)
        index = interface_indexes(ctx.lab.netns(host))
        a, b = (index[nic] for nic in nics)
        record.update(node=host, nics=nics, ifindexes=[a, b], created_clsact=[])
        program = BpfObject(OBJECT)
        try:
            partners = program.map_fd("partners")
            update(partners, a.to_bytes(4, "little"), b.to_bytes(4, "little"))
            update(partners, b.to_bytes(4, "little"), a.to_bytes(4, "little"))
            with ctx.lab.netlink(host) as ipr:
                for ifindex in (a, b):
                    try:
                        ipr.tc("add", "clsact", ifindex)
                        record["created_clsact"].append(ifindex)  # a lossy lab has none on its hosts
                    except NetlinkError as exc:
                        if exc.code != errno.EEXIST:
                            raise
                # Ingress first: a frame moved out by cross_out must find cross_in on the partner.
                for hook in (CLSACT_INGRESS, CLSACT_EGRESS):
                    fd = program.program_fd(PROGRAMS[hook])
                    for ifindex in (a, b):
                        ipr.tc("add-filter", "bpf", ifindex, ":1", fd=fd, name=f"ftw_{fault_id}"[:15],
                               parent=hook, prio=PRIORITIES[hook], classid=1, direct_action=True)
        finally:
            program.close()  # the filters hold the programs, the programs their map

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        with ctx.lab.netlink(record["node"]) as ipr:
            for ifindex in record["ifindexes"]:
                if ifindex in record["created_clsact"]:
                    _tolerant(lambda i=ifindex: ipr.tc("del", "clsact", i))
                    continue
                for hook in (CLSACT_EGRESS, CLSACT_INGRESS):  # egress first: nothing moves out any more
                    _tolerant(lambda i=ifindex, h=hook: ipr.tc("del-filter", "bpf", i, parent=h,
                                                               prio=PRIORITIES[h]))


def _tolerant(call) -> None:
    """A clear that runs twice (after a crash) finds its filters gone: that is done, not an error."""
    try:
        call()
    except NetlinkError as exc:
        if exc.code not in (errno.ENOENT, errno.EINVAL):
            raise
