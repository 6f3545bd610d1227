"""flap: the link goes down and up, period_s per cycle (down for the first half), count times
or until the fault ends. Runs as a fault agent; ending it leaves the link up."""

from __future__ import annotations

import time

from pydantic import Field

from twin.faults import background
from twin.faults.base import FaultContext, OnLink, Params
from twin.faults.netlink import restore_routes, set_link_state, static_routes
from twin.model.targets import resolve_link


class FlapParams(Params):
    link: str = Field(description='the link between two nodes, e.g. "leaf-g1-r1 -- spine-r1-s1"')
    period_s: float = Field(gt=0.1, le=3600, description="seconds per down/up cycle (down for half)")
    count: int | None = Field(None, ge=1, description="cycles; omitted = until the fault ends")


class Flap(OnLink):
    name = "flap"
    params = FlapParams

    def check(self, fabric, params, lasts_s):
        if lasts_s is None:
            return []
        if params.period_s > lasts_s:
            return [("period_s", f"a period of {params.period_s} s is longer than the fault ({lasts_s:g} s): the "
                     "link would go down once and never come back up within it",
                     "a shorter period_s, or a longer fault")]
        if params.count is not None and params.count * params.period_s > lasts_s:
            return [("count",
                     f"{params.count} cycles of {params.period_s} s take {params.count * params.period_s:g} s; "
                     f"the fault lasts {lasts_s:g} s", "fewer cycles, a shorter period_s, or a longer fault")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        record["agent"] = background.start(ctx, fault_id)

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        record["report"] = background.stop(ctx, fault_id)

    def run(self, ctx: FaultContext, fault_id: str, params, stopping) -> None:
        link, _a, _b = resolve_link(ctx.lab.fabric, params.link)
        ends = [link.a, link.b]
        routes = {end.node: static_routes(ctx, end.node, end.ifname) for end in ends}
        cycles, half = 0, params.period_s / 2
        try:
            while not stopping.is_set() and (params.count is None or cycles < params.count):
                for end in ends:
                    set_link_state(ctx, end.node, end.ifname, up=False)
                if not cycles:
                    background.took_hold(ctx.lab.state, fault_id)
                stopping.wait(half)
                for end in ends:
                    set_link_state(ctx, end.node, end.ifname, up=True)
                for node, node_routes in routes.items():
                    restore_routes(ctx, node, node_routes)
                cycles += 1
                background.write_report(ctx.lab.state, fault_id, {"cycles": cycles, "at": time.time()})
                stopping.wait(half)
        finally:
            for end in ends:
                set_link_state(ctx, end.node, end.ifname, up=True)
            for node, node_routes in routes.items():
                restore_routes(ctx, node, node_routes)
