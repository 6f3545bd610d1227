"""rank_hang: a host's training rank stops before its next collective and never enters it, as a
hung GPU stops its rank while the process lives: every peer waits in that collective until its
timeout, and the job reports a network timeout while the network is innocent."""

from __future__ import annotations

from twin.faults.ranks import OnRanks, RankParams


class RankHang(OnRanks):
    name = "rank_hang"
    params = RankParams

    def request(self, fault_id: str, params) -> dict:
        return {"hang": True, "fault": fault_id}
