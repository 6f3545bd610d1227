"""Fault agents: faults that act over time (flap cycles, timed pauses) run in a detached
process, recorded in the lab state by pid. Its command line carries the lab directory, so
`twin lab down` ends it like any process of the lab.

    python -m twin.faults.agent <lab-dir> <fault-id>
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from twin.procs import terminate
from twin.seal import key_of, seal, unseal
from twin.lab.state import LabState, Resource
from twin.faults.base import FaultContext


def report_path(state: LabState, fault_id: str) -> Path:
    return state.directory / "faults" / f"{fault_id}.json"


def start(ctx: FaultContext, fault_id: str) -> int:
    log = ctx.state.directory / "faults" / f"{fault_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    resource = ctx.state.record(Resource(kind="agent", name=f"fault/{fault_id}"))
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "twin.faults.agent", str(ctx.state.directory), fault_id],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    resource.pid = proc.pid
    ctx.state.save()
    return proc.pid


def stop(ctx: FaultContext, fault_id: str) -> dict:
    """End the agent (it finishes its current step and restores what it changed); return its report."""
    for resource in [r for r in ctx.state.resources if r.kind == "agent" and r.name == f"fault/{fault_id}"]:
        if resource.pid:
            terminate([resource.pid], grace_s=5.0)
        ctx.state.resources.remove(resource)
    ctx.state.save()
    return read_report(ctx.state, fault_id)


def read_report(state: LabState, fault_id: str) -> dict:
    path = report_path(state, fault_id)
    if not path.is_file():
        return {}
    text = path.read_text()
    return json.loads(unseal(key_of(state.directory), text) if state.sealed else text)


def write_report(state: LabState, fault_id: str, report: dict) -> None:
    path = report_path(state, fault_id)
    tmp = path.with_suffix(".tmp")
    text = json.dumps(report)
    tmp.write_text(seal(key_of(state.directory), text) if state.sealed else text)  # a training session's
    tmp.replace(path)


def main() -> None:
    from twin.lab.handle import running_lab
    from twin.lab.runtime import get_runtime
    from twin.faults import get_kind

    lab_dir, fault_id = Path(sys.argv[1]), sys.argv[2]
    state, fabric = running_lab(lab_dir.name)
    fault = next(f for f in state.faults if f["id"] == fault_id)
    kind = get_kind(fault["kind"])
    ctx = FaultContext(get_runtime(state.runtime, state.lab), state, fabric, fault.get("seed", 1))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    kind.run(ctx, fault_id, kind.params(**fault["params"]), stopping)


if __name__ == "__main__":
    main()
