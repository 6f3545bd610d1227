"""Starting a lab's BFD data plane (before FRR: each bfdd connects to it) and reading what it
published."""

from __future__ import annotations

import json
import time

from twin.errors import TwinError
from twin.lab.bfd.paths import READY, STATS, directory
from twin.lab.handle import Lab, python_module
from twin.lab.state import LabState
from twin.procs import alive

RESOURCE = "bfd/dataplane"
START_TIMEOUT_S = 20.0
# Its sockets and sessions: AIPod's 14,336 sessions took 20 s on a quiet VM (1.4 ms each) and more
# than 27 s while the lab's 752 lldpd started beside it (2026-12-03): four times the quiet figure.
START_S_PER_SESSION = 0.005


def start(lab: Lab) -> int:
    """Start the data plane (a host process the lab owns) and wait until every switch's sockets
    are open."""
    base = directory(lab.paths.root)
    log = base / "dataplane.log"
    proc = lab.spawn_owned(RESOURCE, python_module("twin.lab.bfd.dataplane", str(lab.paths.root)), log,
                           kind="controller").proc
    fabric = lab.fabric
    sessions = sum(1 for switch in fabric.local_switches for link in fabric.links_of(switch.name)
                   if link.kind == "fabric")
    timeout_s = START_TIMEOUT_S + START_S_PER_SESSION * sessions
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (base / READY).exists():
            return proc.pid
        if proc.poll() is not None:
            raise TwinError("the BFD data plane exited while starting", hint=log.read_text()[-900:] or f"see {log}")
        time.sleep(0.05)
    raise TwinError(f"the BFD data plane did not open its sockets within {timeout_s:.0f} s", hint=f"see {log}")


def running(state: LabState) -> bool:
    return any(r.name == RESOURCE and r.pid and alive(r.pid) for r in state.resources)


def status(lab: Lab) -> dict | None:
    """For `twin lab status`: None when bfdd sends its own packets, else whether the data plane
    runs and what it last published."""
    if not lab.fabric.bfd_offload:
        return None
    published = stats(lab) or {}
    return {"running": running(lab.state), "sessions": published.get("sessions", 0), "up": published.get("up", 0),
            "tx_packets": published.get("tx_packets", 0), "rx_packets": published.get("rx_packets", 0),
            "in_kernel": published.get("in_kernel", 0), "fast_path": published.get("fast_path", False),
            "cpu_s": published.get("cpu_s", 0.0)}


def stats(lab: Lab) -> dict | None:
    """What the data plane last published (packets, sessions up, CPU seconds), if it runs."""
    try:
        return json.loads((directory(lab.paths.root) / STATS).read_text())
    except (OSError, ValueError):
        return None


def stats_after(lab: Lab, t_mono: float, timeout_s: float = 5.0) -> dict:
    """The first publication made after `t_mono` (time.monotonic(), the same clock in every process):
    what the data plane knew then, not what it knew up to STATS_EVERY_S before."""
    deadline = time.monotonic() + timeout_s
    while (published := stats(lab)) is None or published["t_mono"] <= t_mono:
        if time.monotonic() > deadline:
            raise TwinError(f"the BFD data plane published nothing within {timeout_s:.0f} s",
                            hint=f"see {directory(lab.paths.root) / 'dataplane.log'}; `twin lab status` shows "
                                 "whether it runs")
        time.sleep(0.05)
    return published
