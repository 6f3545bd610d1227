"""rank_crash: a host's training rank dies, as a GPU fault (an Xid error, an uncorrectable ECC
error) kills the process that drives it: its connections close, its peers' collective fails with
the connection broken, and the job reports a network error while the network is innocent.
Clearing the fault brings the rank back as an elastic launcher restarts a failed worker: a new
process that rejoins its peers' next process group at the step they are in (launcher.py)."""

from __future__ import annotations

from twin.faults.ranks import OnRanks, RankParams


class RankCrash(OnRanks):
    name = "rank_crash"
    params = RankParams

    def request(self, fault_id: str, params) -> dict:
        return {"crash": True, "fault": fault_id}
