"""blackhole: a switch silently discards forwarded traffic toward a prefix or a host,
while BGP still advertises it: an entry of its forwarding chip gone bad, routing untouched.

Done by the physical layer of the switch's ports (lab/ports/phy.py: a prefix in its black-hole table,
read by the same program on every port of every lab), so nothing a node lists shows it, as
nothing lists a corrupted entry of a forwarding chip. A packet that expires at the switch still
reaches its CPU and is answered (traceroute sees the switch, not beyond)."""

from __future__ import annotations

from ipaddress import IPv4Network

from pydantic import Field, model_validator

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.ports import phy
from twin.model.targets import TargetError, resolve_node


class PrefixOrHost(Params):
    """Traffic toward a prefix, or toward every NIC prefix of a host (black holes, route filters)."""
    prefix: str | None = Field(None, description="destination prefix, e.g. 10.2.0.6/31")
    host: str | None = Field(None, description="a host: every NIC prefix of it")

    @model_validator(mode="after")
    def _one_target(self):
        if (self.prefix is None) == (self.host is None):
            raise ValueError("give exactly one of prefix or host")
        return self


class BlackholeParams(PrefixOrHost):
    node: str = Field(description="the switch that discards the traffic")


def prefixes(fabric, params) -> list[str]:
    if params.host:
        host = resolve_node(fabric, params.host, roles=("host",))
        return [str(link.network) for link in fabric.links_of(host)]
    try:
        prefix = IPv4Network(params.prefix, strict=False)
    except ValueError as exc:
        raise TargetError(f"'{params.prefix}' is not an IPv4 prefix", hint="e.g. 10.2.0.6/31", key="prefix") from exc
    if not any(prefix.overlaps(link.network) for link in fabric.links):
        hosts = sorted(str(link.network) for link in fabric.links if link.kind == "host")
        raise TargetError(f"no link of the lab is in {prefix}: the black hole would discard nothing",
                          hint=f"host NIC prefixes: {', '.join(hosts[:4])}{' ...' if len(hosts) > 4 else ''} "
                               "(`twin lab show`), or give host:", key="prefix")
    return [str(prefix)]


class Blackhole(OnNode):
    name = "blackhole"
    params = BlackholeParams
    training_level = 2
    roles = ("leaf", "spine", "superspine")

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        link = rng.choice(sorted((each for each in fabric.links if each.kind == "host"), key=lambda each: each.name))
        return {"node": link.a.node, "host": link.b.node}  # a leaf, and a host behind it

    def targets(self, fabric, params):
        prefixes(fabric, params)  # the prefix or host must be in the lab: checked when the scenario loads
        return super().targets(fabric, params)

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node = resolve_node(ctx.lab.fabric, params.node, roles=("leaf", "spine", "superspine"))
        record.update(node=node, prefixes=prefixes(ctx.lab.fabric, params))
        ctx.lab.state.save()  # recorded before the chip changes: a crash between the two clears it
        for prefix in record["prefixes"]:
            phy.add_blackhole(ctx.lab, node, prefix)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        for prefix in record.get("prefixes", []):
            phy.remove_blackhole(ctx.lab, record["node"], prefix)
