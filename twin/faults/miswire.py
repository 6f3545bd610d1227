"""miswire: two cables swapped at one node, the mistake of a rack cabled by hand or re-cabled during
maintenance. On a host (`nics`), the "8 NICs per server" mistake: NIC i is plugged into the leaf
port meant for NIC j and the other way round. Each NIC keeps its address, so it now faces a leaf
port of another rail's subnet: its ARP for its gateway goes unanswered and the frames its
neighbour cache still addresses reach a port with another MAC, so both NICs lose every packet
while their links stay up and routing sees nothing. On a switch (`ports`), two of its cables
(a leaf's two uplinks) trade ports: each port faces a neighbour whose /31 is not its own, so
the two BGP sessions never come back and ECMP loses both members. LLDP at the far ends hears the
node's ports in each other's places.

Emulated on real frames by the ports' physical layer (lab/ports/phy.py, ebpf/phy.bpf.c: the same
programs on every port of every lab, the two ports' entries in its `phy_partners` map): what one
port sends leaves by the other's cable, what arrives on one cable reaches the other port; every
port keeps its name, address, MAC and sockets, as a physical port does, and nothing a node lists
differs from a healthy lab (LLDP tells, as on real hardware). The switch ports' queue programs
still count each frame on the queue it really crosses.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.ports import phy
from twin.model.fabric import SWITCH_ROLES
from twin.model.targets import TargetError, resolve_node


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
        record.update(node=node, ports=names)
        ctx.lab.state.save()  # recorded before the cables move: a crash between the two clears it
        phy.cross(ctx.lab, node, names)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        phy.uncross(ctx.lab, record["node"], record["ports"])
