"""slow_compute: one host's training rank computes `factor` times slower (a GPU throttling on
heat or power), so every step waits for it at the collective: "one slow, all slow", with the
network innocent."""

from __future__ import annotations

from pydantic import Field

from twin.errors import TwinError
from twin.faults.ranks import OnRanks, RankOf, RankParams


class SlowComputeParams(RankParams):
    factor: float = Field(gt=1, le=100, description="the rank's compute takes this many times as long, e.g. 1.5")


class SlowCompute(OnRanks):
    name = "slow_compute"
    params = SlowComputeParams
    workload_kinds = frozenset({"train"})  # the one kind that computes between collectives

    def training_entry(self, fabric, rng, links: list[str]) -> dict:
        return {**super().training_entry(fabric, rng, links), "factor": 1.5}  # a throttling GPU

    def request(self, fault_id: str, params) -> dict:
        return {"compute": params.factor, "fault": fault_id}

    def chosen(self, ranks: list[RankOf], params) -> list[RankOf]:
        computing = [rank for rank in ranks if rank.compute_ms > 0]
        if not computing:
            raise TwinError(f"the ranks on {params.node} compute nothing between collectives (compute_ms 0)",
                            hint="slow_compute slows a training step: run a `kind: train` workload there")
        return computing
