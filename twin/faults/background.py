"""Faults that act over time (flap cycles) run in a fault agent: a detached process the lab
owns (twin/faults/over_time.py). Starting and ending it, and the report it leaves."""

from __future__ import annotations

import json
import time
from pathlib import Path

from twin.errors import TwinError
from twin.faults.base import FaultContext
from twin.lab.handle import python_module
from twin.lab.state import LabState
from twin.procs import alive, terminate
from twin.seal import key_of, seal, unseal


def report_path(state: LabState, fault_id: str) -> Path:
    return state.directory / "faults" / f"{fault_id}.json"


# How long an agent may take to act: its start is a Python process importing the twin (1.3 s on a
# slow 2-core VM beside a lab's daemons, 2026-12-02), far more under a heavy drill.
HOLD_WAIT_S = 60.0


def held_path(state: LabState, fault_id: str) -> Path:
    return state.directory / "faults" / f"{fault_id}.held"


def start(ctx: FaultContext, fault_id: str) -> int:
    """Start the fault's agent; return its pid once the fault has taken hold (the agent calls
    took_hold). A fault's onset is the end of its apply (results/report.py), and detection and
    recovery are timed from it: a flap graded from the agent's start counted the agent's own
    start-up, 1.3 s, against every detector (the rail4 drill's link-state detector, its verdict
    5 ms after the port went down, failed `within_s: 1.5` at 1.599 s in CI). Ended and an error
    raised when the agent ends first or takes longer than HOLD_WAIT_S (the apply's caller clears
    the fault, which ends the agent)."""
    lab = ctx.lab
    held = held_path(lab.state, fault_id)
    held.unlink(missing_ok=True)
    log = lab.paths.faults / f"{fault_id}.log"
    argv = python_module("twin.faults.over_time", str(lab.paths.root), fault_id)
    spawned = lab.spawn_owned(f"fault/{fault_id}", argv, log, kind="agent")
    deadline = time.monotonic() + HOLD_WAIT_S
    while not held.exists():
        if spawned.proc.poll() is not None:
            raise TwinError(f"the agent of fault '{fault_id}' ended (exit code {spawned.proc.returncode}) "
                            "before the fault took hold", hint=f"its log: {log}")
        if time.monotonic() > deadline:
            raise TwinError(f"the agent of fault '{fault_id}' did not act within {HOLD_WAIT_S:g} s",
                            hint=f"the machine may be overloaded; its log: {log}")
        time.sleep(0.01)
    return spawned.resource.pid


def took_hold(state: LabState, fault_id: str) -> None:
    """The agent's word that its first change is made (start waits for it)."""
    held_path(state, fault_id).touch()


def stop(ctx: FaultContext, fault_id: str) -> dict:
    """End the agent (it finishes its current step and restores what it changed); return its report."""
    agents = [r for r in ctx.lab.owned("agent", f"fault/{fault_id}") if r.name == f"fault/{fault_id}"]
    terminate([r.pid for r in agents if r.pid], grace_s=5.0)
    # One still exiting (blocked in the kernel past SIGKILL's wait) stays recorded: teardown
    # waits for it again instead of leaving it unowned.
    ctx.lab.forget([r for r in agents if not (r.pid and alive(r.pid))])
    held_path(ctx.lab.state, fault_id).unlink(missing_ok=True)
    return read_report(ctx.lab.state, fault_id)


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
