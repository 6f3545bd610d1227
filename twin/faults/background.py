"""Faults that act over time (flap cycles) run in a fault agent: a detached process the lab
owns (twin/faults/over_time.py). Starting and ending it, and the report it leaves."""

from __future__ import annotations

import json
from pathlib import Path

from twin.faults.base import FaultContext
from twin.lab.handle import python_module
from twin.lab.state import LabState
from twin.procs import alive, terminate
from twin.seal import key_of, seal, unseal


def report_path(state: LabState, fault_id: str) -> Path:
    return state.directory / "faults" / f"{fault_id}.json"


def start(ctx: FaultContext, fault_id: str) -> int:
    lab = ctx.lab
    argv = python_module("twin.faults.over_time", str(lab.paths.root), fault_id)
    return lab.spawn_owned(f"fault/{fault_id}", argv, lab.paths.faults / f"{fault_id}.log", kind="agent").pid


def stop(ctx: FaultContext, fault_id: str) -> dict:
    """End the agent (it finishes its current step and restores what it changed); return its report."""
    agents = [r for r in ctx.lab.owned("agent", f"fault/{fault_id}") if r.name == f"fault/{fault_id}"]
    terminate([r.pid for r in agents if r.pid], grace_s=5.0)
    # One still exiting (blocked in the kernel past SIGKILL's wait) stays recorded: teardown
    # waits for it again instead of leaving it unowned.
    ctx.lab.forget([r for r in agents if not (r.pid and alive(r.pid))])
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
