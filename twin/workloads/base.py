"""What every workload gets from the runner."""

from __future__ import annotations

from dataclasses import dataclass

from twin.events import EventLog
from twin.lab.handle import Lab


@dataclass
class WorkloadContext:
    """A running lab plus what a workload of one run needs: where to log, its seed, its run."""
    lab: Lab
    events: EventLog
    seed: int = 1
    run_id: str = "run"  # unique per run: names the workload's files in the lab directory
