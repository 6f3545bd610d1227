"""The fault agent: a fault that acts over time (flap cycles) runs its `run` here, in a detached
process the lab owns. Its command line carries the lab directory, so `twin lab down` ends it
like any process of the lab.

    python -m twin.faults.over_time <lab-dir> <fault-id>
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from twin.faults.base import FaultContext
from twin.faults.registry import get_kind
from twin.lab.handle import Lab


def main() -> None:
    lab_dir, fault_id = Path(sys.argv[1]), sys.argv[2]
    lab = Lab.open(lab_dir.name)
    fault = next(f for f in lab.state.faults if f["id"] == fault_id)
    kind = get_kind(fault["kind"])
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    kind.run(FaultContext(lab, fault.get("seed", 1)), fault_id, kind.params(**fault["params"]), stopping)


if __name__ == "__main__":
    main()
