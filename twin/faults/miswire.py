"""miswire: two cables swapped at one node, the mistake of a rack cabled by hand or re-cabled during
maintenance. On a host (`nics`), the "8 NICs per server" mistake: NIC i is plugged into the leaf
port meant for NIC j and the other way round. Each NIC keeps its address, so it now faces a leaf
port of another rail's subnet: its ARP for its gateway goes unanswered and the frames its
neighbour cache still addresses reach a port with another MAC, so both NICs lose every packet
while their links stay up and routing sees nothing. On a switch (`ports`), two of its cables
(a leaf's two uplinks) trade ports: each port faces a neighbour whose /31 is not its own, so
the two BGP sessions never come back and ECMP loses both members. LLDP at the far ends hears the
node's ports in each other's places.

Emulated on real frames by a wire element in the node (ebpf/wire.bpf.c): what one port sends
leaves by the other's cable, what arrives on one cable reaches the other port; every port keeps
its name, address, MAC and sockets, as a physical port does. The switch ports' queue programs
still count each frame on the queue it really crosses.
"""

from __future__ import annotations

import errno
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pyroute2.netlink.exceptions import NetlinkError

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.ebpf.libbpf import BpfObject, update
from twin.lab.nsutil import interface_indexes
from twin.lab.pfc import queues
from twin.lab.pfc.queues import CLSACT_PARENTS
from twin.model.fabric import SWITCH_ROLES
from twin.model.targets import TargetError, resolve_node

OBJECT = Path(__file__).resolve().parents[1] / "lab" / "ebpf" / "wire.bpf.o"
CLSACT_INGRESS, CLSACT_EGRESS = CLSACT_PARENTS[queues.CLSACT_INGRESS], CLSACT_PARENTS[queues.CLSACT_EGRESS]
# cross_out runs before anything on the egress; cross_in after the queue program that counts a frame
# off its switch port's queue (attached without a priority: the kernel gives the first 49152).
PRIORITIES = {CLSACT_EGRESS: 1, CLSACT_INGRESS: 0xF000}
PROGRAMS = {CLSACT_EGRESS: "cross_out", CLSACT_INGRESS: "cross_in"}


class MiswireParams(Params):
    node: str = Field(description="the host or switch whose cables are swapped")
    nics: list[str] | None = Field(None, description="a host: its two NICs whose cables trade leaf ports, "
                                                     "e.g. [nic1, nic2]")
    ports: list[str] | None = Field(None, description="a switch: its two ports whose cables trade places, "
                                                      "e.g. [sp-r1s1, sp-r1s2]")

    @field_validator("nics", "ports")
    @classmethod
    def _two_distinct(cls, names: list[str] | None) -> list[str] | None:
        if names is not None and (len(names) != 2 or names[0] == names[1]):
            raise ValueError("name two different ones, e.g. [nic1, nic2]")
        return names

    @model_validator(mode="after")
    def _one_pair(self):
        if (self.nics is None) == (self.ports is None):
            raise ValueError("give nics (a host's two NICs) or ports (a switch's two ports), not both")
        return self


def crossed_ports(fabric, params) -> tuple[str, list[str]]:
    """The node and its two ports, each checked against the model."""
    node = resolve_node(fabric, params.node)
    own = [link.endpoint(node).ifname for link in fabric.links_of(node)]
    is_host = fabric.nodes[node].role == "host"
    names, key = (params.nics, "nics") if params.nics is not None else (params.ports, "ports")
    if is_host != (key == "nics"):
        right = "nics (a host's NICs)" if is_host else "ports (a switch's ports)"
        raise TargetError(f"{node} is a {fabric.nodes[node].role}: name its {right}",
                          hint=("NICs: " if is_host else "ports: ") + ", ".join(own), key=key)
    for name in names:
        if name not in own:
            raise TargetError(f"{node} has no {'NIC' if is_host else 'port'} '{name}'",
                              hint=("NICs: " if is_host else "ports: ") + ", ".join(own), key=key)
    return node, list(names)


class Miswire(OnNode):
    name = "miswire"
    params = MiswireParams
    training_level = 4
    roles = ("host", *SWITCH_ROLES)

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        hosts = sorted({n for n, _e in fabric.host_nics()})
        host = rng.choice(hosts)
        nics = sorted(link.endpoint(host).ifname for link in fabric.links_of(host))
        return {"node": host, "nics": sorted(rng.sample(nics, 2))}

    def trainable(self, fabric) -> bool:
        return fabric.rails >= 2

    def targets(self, fabric, params):
        crossed_ports(fabric, params)
        return super().targets(fabric, params)

    def check(self, fabric, params, lasts_s):
        if params.nics is not None and fabric.rails < 2:
            return [("nics", f"lab {fabric.name} has one NIC per host: there is no second cable to swap with",
                     "run it on a lab with rails: 2 or more")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, names = crossed_ports(ctx.lab.fabric, params)
        index = interface_indexes(ctx.lab.netns(node))
        a, b = (index[name] for name in names)
        record.update(node=node, ports=names, ifindexes=[a, b], created_clsact=[])
        program = BpfObject(OBJECT)
        try:
            partners = program.map_fd("partners")
            update(partners, a.to_bytes(4, "little"), b.to_bytes(4, "little"))
            update(partners, b.to_bytes(4, "little"), a.to_bytes(4, "little"))
            with ctx.lab.netlink(node) as ipr:
                for ifindex in (a, b):
                    try:
                        ipr.tc("add", "clsact", ifindex)
                        record["created_clsact"].append(ifindex)  # a lossy lab has none
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
