"""The lab's CPUs kept awake while it is up: one process the lab owns holds a CPU latency request
of 0 us (procs.cpus_awake) from the first phase of `twin lab up` until `twin lab down` ends it, or
until it dies (the kernel drops the request with its descriptor), whatever else the lab runs. Like
the PFC controller, it ends itself when the lab's state is gone (removed, then `twin cleanup` by the
nodes' names or labels): nothing would end it, and it would keep the machine's CPUs polling.

Every lab needs it, lossy or lossless, with or without a BFD data plane: each port's HTB shaper runs
on the kernel's timers, and a halted vCPU fires them late (2026-12-02, docs/benchmarks.md).

    python -m twin.lab.awake <lab's state file>   (started by `start`; its path marks it as the lab's)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from twin.procs import cpus_awake

if TYPE_CHECKING:  # the holder itself imports nothing of the lab: it starts in a few milliseconds
    from twin.lab.handle import Lab

RESOURCE = "cpu/awake"
HELD = "held"
STATE_CHECK_S = 1.0


def start(lab: Lab) -> str | None:
    """Start the holder and wait until it holds the request; the reason when the kernel refused it
    (no PM QoS, or no right to it in a container): the lab runs on, its timers may then fire late."""
    from twin.lab.handle import python_module

    log = lab.paths.root / "awake.log"
    spawned = lab.spawn_owned(RESOURCE, python_module("twin.lab.awake", str(lab.paths.state)), log,
                              kind="controller", pipe_stdout=True)
    with spawned.proc.stdout:
        answer = spawned.proc.stdout.readline().strip()
    if answer == HELD:
        return None
    spawned.proc.wait()
    lab.forget([spawned.resource])
    return answer or f"the CPU latency holder exited (see {log})"


def main() -> None:
    state = Path(sys.argv[1])
    if (refused := cpus_awake()) is not None:
        print(f"{refused}: the ports' timers may fire late", flush=True)
        return
    print(HELD, flush=True)
    sys.stdout.close()  # nobody reads on: a full pipe must never block it
    while state.exists():  # until SIGTERM (teardown) ends it, or the lab's state goes
        time.sleep(STATE_CHECK_S)


if __name__ == "__main__":
    main()
