"""What every workload gets from the runner."""

from __future__ import annotations

from dataclasses import dataclass

from twin.events import EventLog
from twin.model.fabric import Fabric
from twin.lab.runtime import Runtime
from twin.lab.state import LabState


@dataclass
class WorkloadContext:
    runtime: Runtime
    state: LabState
    fabric: Fabric
    events: EventLog
    seed: int = 1
    run_id: str = "run"  # unique per run: names the workload's files in the lab directory
