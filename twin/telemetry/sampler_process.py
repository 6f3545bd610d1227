"""A run's telemetry sampler in a process of its own.

The sampler reads every port's counters over netlink and decodes them in Python. As a thread of
the run's process it held the run's interpreter lock 31-42 % of a one-way drill on rail4 (py-spy
--gil, 2026-11-30), and the probe follower, whose intervals the live detectors wait for, named
faults 0.10-2.64 s after a replay of the same probes did (0.09-0.51 s with no sampler). Here it has
an interpreter of its own; it writes the same metrics file. The lab owns the process (its state
records it, teardown ends it by pid); it samples until its input closes, then reports its stats.

    python -m twin.telemetry.sampler_process <lab> <period_ms> <metrics file>

It says {"ready": true} once it has the lab open and its sampler started, and {"stats": {...}}
(Sampler.stats) as it ends.
"""

from __future__ import annotations

import json
import os
import select
import sys
from pathlib import Path

from twin.errors import TwinError
from twin.lab.handle import Lab, python_module
from twin.procs import terminate
from twin.telemetry.sampler import Sampler

START_S = 60.0  # opening a lab and its first sockets: seconds at pod128 under load
STOP_S = 10.0  # a sampler ends within a read (a rail8 read takes ~50 ms); longer is stuck


class SamplerProcess:
    """The run's side: start() spawns it, ready() waits until it samples, stop() ends it and
    returns its stats (as Sampler.stop)."""

    def __init__(self, lab: Lab, period_ms: int, output: Path):
        self.lab, self.period_ms, self.output = lab, period_ms, output
        self.log = lab.paths.root / "telemetry" / f"sampler-{os.getpid()}.log"
        self._spawned = None
        self._ready = False

    def start(self) -> None:
        """Spawn it; it loads while the caller goes on (ready() waits for it)."""
        self._spawned = self.lab.spawn_owned(
            f"telemetry/sampler-{os.getpid()}",
            python_module("twin.telemetry.sampler_process", self.lab.name, str(self.period_ms), str(self.output)),
            self.log, kind="agent", pipe_stdout=True, pipe_stdin=True)

    def ready(self) -> None:
        """Until it samples."""
        if self._spawned is not None and not self._ready:
            if not self._reply(self._spawned.proc, START_S).get("ready"):
                self.stop()
                raise TwinError("the telemetry sampler did not start", hint=f"see {self.log}")
            self._ready = True

    def stop(self) -> dict:
        if self._spawned is None:
            return {}
        proc, spawned, self._spawned = self._spawned.proc, self._spawned, None
        stats: dict = {}
        try:
            proc.stdin.close()
            stats = self._reply(proc, STOP_S).get("stats", {})
            proc.wait(timeout=STOP_S)
        except (OSError, ValueError):
            pass
        except Exception:  # noqa: BLE001 - stuck: ended by pid like any process of the lab
            terminate([proc.pid], grace_s=2.0)
        self.lab.forget([spawned.resource])
        return stats

    @staticmethod
    def _reply(proc, timeout_s: float) -> dict:
        """Its next line, or {} if none came within timeout_s (it ended, or is stuck)."""
        if not select.select([proc.stdout], [], [], timeout_s)[0]:
            return {}
        try:
            return json.loads(proc.stdout.readline() or "{}")
        except json.JSONDecodeError:
            return {}


def main() -> None:
    lab_name, period_ms, output = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything a reader prints goes to the log, never into the replies
    sampler = Sampler(Lab.open(lab_name), period_ms, output)
    sampler.start()
    print(json.dumps({"ready": True}), file=replies, flush=True)
    sys.stdin.read()  # until the run closes our input (or goes away)
    print(json.dumps({"stats": sampler.stop()}), file=replies, flush=True)


if __name__ == "__main__":
    main()
