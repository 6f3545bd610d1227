"""slow_node: a host NIC (or every NIC of a host) runs at rate_pct of line rate, both directions."""

from __future__ import annotations

from pydantic import Field

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.kernel import shaping
from twin.model.buffers import port_shaping
from twin.model.nics import fabric_nics, nic_links
from twin.model.ports import Port
from twin.model.targets import TargetError, resolve_node


class SlowNodeParams(Params):
    node: str = Field(description="the host")
    nic: str | None = Field(None, description="one NIC (e.g. nic2: both ports of a dual-port NIC), or one port "
                                              "of a dual-port NIC (nic2a); omitted = every NIC of the host")
    rate_pct: float = Field(gt=0, lt=100, description="share of line rate the NIC still runs at")


def _ends(fabric, params):
    host = resolve_node(fabric, params.node, roles=("host",))
    links = nic_links(fabric, host, params.nic)
    if not links:
        names = sorted({nic.ifname for nic in fabric_nics(fabric) if nic.host == host}
                       | {link.endpoint(host).ifname for link in fabric.links_of(host)})
        raise TargetError(f"{host} has no NIC '{params.nic}'", hint="NICs: " + ", ".join(names),
                          key="nic")
    return [end for link in links for end in (link.a, link.b)]


def _is_nic(fabric, node: str, ifname: str) -> bool:
    """Whether this end of a NIC's link is the NIC or the leaf's port: their queue trees differ
    (model/queue_tree.py), and port_shaping says which a port has."""
    return port_shaping(fabric, Port(node, ifname))[3]


class SlowNode(OnNode):
    name = "slow_node"
    params = SlowNodeParams
    training_level = 2
    roles = ("host",)

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"node": rng.choice(sorted(n.name for n in fabric.hosts)), "rate_pct": rng.choice([20, 30])}

    def targets(self, fabric, params):
        _ends(fabric, params)  # the NIC must exist: checked when the scenario loads
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        prior = record["prior"] = []
        for end in _ends(ctx.lab.fabric, params):
            with ctx.lab.netlink(end.node) as ipr:
                index = ipr.link_lookup(ifname=end.ifname)[0]
                rate = shaping.shaped_rate_bps(ipr, index)
                prior.append({"node": end.node, "ifname": end.ifname, "rate_bps": rate})
                shaping.set_class_rate(ipr, index, int(rate * params.rate_pct / 100), ctx.lab.fabric.mtu,
                                       _is_nic(ctx.lab.fabric, end.node, end.ifname))

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        for item in record["prior"]:
            with ctx.lab.netlink(item["node"]) as ipr:
                shaping.set_class_rate(ipr, ipr.link_lookup(ifname=item["ifname"])[0], item["rate_bps"],
                                       ctx.lab.fabric.mtu, _is_nic(ctx.lab.fabric, item["node"], item["ifname"]))
