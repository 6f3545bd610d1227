"""bgp_down: one BGP session is shut on one side, as a misconfiguration would; links stay up."""

from __future__ import annotations

from pydantic import Field

from ..errors import RuntimeBackendError
from ..frr import vtysh_argv
from . import register
from .base import FaultContext, OnLink, Params, TargetError, resolve_link


class BgpDownParams(Params):
    link: str = Field(description='the session\'s link; shut on the first node: "a -- b"')


def _session(ctx: FaultContext, params):
    link, a, b = resolve_link(ctx.fabric, params.link)
    if not (ctx.fabric.nodes[a].is_switch and ctx.fabric.nodes[b].is_switch):
        raise TargetError(f"{params.link} carries no BGP session", hint="hosts do not run BGP")
    return ctx.fabric.nodes[a], str(link.peer(a).address.ip)


def _configure(ctx: FaultContext, node, *commands: str) -> None:
    argv = vtysh_argv(ctx.state, node.name, "configure terminal", f"router bgp {node.asn}", *commands)
    result = ctx.runtime.exec(node.name, argv)
    if result.rc != 0:
        raise RuntimeBackendError(f"vtysh on {node.name} failed: {result.stderr.strip() or result.stdout.strip()}")


class BgpDown(OnLink):
    name = "bgp_down"
    params = BgpDownParams

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, peer = _session(ctx, params)
        record.update(node=node.name, peer=peer)
        _configure(ctx, node, f"neighbor {peer} shutdown")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        node, peer = _session(ctx, params)
        _configure(ctx, node, f"no neighbor {peer} shutdown")


register(BgpDown())
