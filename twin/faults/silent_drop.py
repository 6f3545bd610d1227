"""silent_drop: the link stays up and drops loss_pct of IP packets in the chosen direction(s).

An nftables netdev table on the receiving end's ingress. Option flows_pct: only the flows
whose 5-tuple hash (seeded by the scenario seed) falls in that share are hit, as a broken
ECMP member or a chip defect does. The kernel's `numgen random` cannot be seeded, so which
packets of a hit flow are dropped is not reproducible; which flows are hit is.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from twin.faults.base import FaultContext, LinkParams, OnLink, nft_share
from twin.lab import nft
from twin.model.targets import receiving_ends, resolve_link


class SilentDropParams(LinkParams):
    loss_pct: float = Field(gt=0, le=100, description="share of packets dropped, 0 < loss_pct <= 100")
    flows_pct: float | None = Field(None, gt=0, le=100,
                                    description="only this share of flows (5-tuple hash) is hit")

    @field_validator("loss_pct", "flows_pct")
    @classmethod
    def _expressible(cls, value, info):
        return nft_share(value, info.field_name)


def drop_rule_exprs(params, seed: int) -> list[dict]:
    exprs = [{"match": {"op": "==", "left": {"meta": {"key": "protocol"}}, "right": "ip"}}]
    if params.flows_pct is not None:
        five_tuple = {"concat": [{"payload": {"protocol": "ip", "field": f}} for f in ("saddr", "daddr")]
                      + [{"payload": {"protocol": "th", "field": f}} for f in ("sport", "dport")]}
        exprs.append({"match": {"op": "<", "left": {"jhash": {"expr": five_tuple, "mod": 10000, "seed": seed}},
                                "right": int(params.flows_pct * 100)}})
    if params.loss_pct < 100:
        exprs.append({"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 10000}},
                                "right": int(params.loss_pct * 100)}})
    return exprs + [{"counter": None}, {"drop": None}]


class SilentDrop(OnLink):
    name = "silent_drop"
    params = SilentDropParams
    training_level = 2

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"link": rng.choice(links), "direction": "both", "loss_pct": rng.choice([5, 10, 20])}

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        link, a, b = resolve_link(ctx.lab.fabric, params.link)
        table = record["table"] = nft.table_name(fault_id)
        nodes = record["nodes"] = []
        for end in receiving_ends(link, a, b, params.direction):
            nodes.append(end.node)
            ctx.lab.state.save()
            chain, commands = nft.device_chain(table, end.ifname, "ingress")
            nft.apply(ctx.lab.runtime, end.node, commands + [nft.rule(table, chain, drop_rule_exprs(params, ctx.seed))])

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        for node in record["nodes"]:
            nft.delete_table(ctx.lab.runtime, node, "netdev", record["table"])
