"""hash_policy: one switch hashes ECMP on another header set than the fabric's (`l3`: addresses
only, as a switch left on its vendor default), so every flow between two NICs takes one path
through it whatever its ports: connections that were spread collide (polarization), and a job
with several connections per pair loses the bandwidth they were meant to add."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.kernel.nsutil import read_sysctl, write_sysctls
from twin.model.sysctls import HASH_POLICIES, HASH_POLICY_SYSCTL


class HashPolicyParams(Params):
    node: str = Field(description="the switch")
    policy: Literal["l3", "l4"] = Field("l3", description="the hash it is left on: l3 (addresses) or l4 (5-tuple)")


class HashPolicy(OnNode):
    name = "hash_policy"
    params = HashPolicyParams
    roles = ("leaf", "spine", "superspine")
    training_level = 4

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {"node": rng.choice(sorted(n.name for n in fabric.switches)),
                "policy": "l3" if fabric.ecmp_hash == "l4" else "l4"}

    def check(self, fabric, params, lasts_s):
        if params.policy == fabric.ecmp_hash:
            return [("policy", f"the lab already hashes on {params.policy} (routing.ecmp_hash): nothing would change",
                     f"give policy: {'l3' if params.policy == 'l4' else 'l4'}")]
        return []

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        path = ctx.lab.netns(params.node)
        record["prior"] = read_sysctl(path, HASH_POLICY_SYSCTL)
        write_sysctls(path, {HASH_POLICY_SYSCTL: HASH_POLICIES[params.policy]})

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        write_sysctls(ctx.lab.netns(params.node), {HASH_POLICY_SYSCTL: record["prior"]})
