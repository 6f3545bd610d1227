"""Built-in detectors, in one list: a name, what it needs from the run, and how it attaches.

probe-localizer  the probe mesh's intervals through the localizer (detect/localizer.py), and on a
                 lossless lab the PFC pause counters through the pause localizer (detect/pauses.py)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twin.detect.localizer import DETECTOR, Localizer
from twin.detect.pauses import PauseLocalizer
from twin.lab.pfc import counters as pfc_counters
from twin.registry import Registry


@dataclass(frozen=True)
class BuiltinDetector:
    summary: str
    needs: str  # the workload kind it feeds on: a scenario without one is refused when it loads
    attach: Callable  # (run: detect.runner.Detectors, name: str) -> None


def _probe_localizer(run, name: str) -> None:
    probes = next(w for w in run.workloads if hasattr(w, "mesh"))
    fabric = run.lab.fabric
    localizer = Localizer.for_interval(fabric.switch_links(), probes.params.report_ms / 1000)
    pauses = PauseLocalizer(fabric) if fabric.pfc else None

    def on_interval(interval) -> None:
        now = run.events.now()
        for verdict in localizer.observe(now, interval.samples):
            run.emit(name, verdict, source="builtin")
        if pauses is not None:  # the pause counters, read as each probe interval is counted
            for verdict in pauses.observe(now, pfc_counters.ports(pfc_counters.read(run.lab.paths.root))):
                run.emit(name, verdict, source="builtin")

    probes.mesh.listeners.append(on_interval)


BUILTINS: Registry[BuiltinDetector] = Registry("builtin detector", plural="built-in detectors")
BUILTINS.add(DETECTOR, BuiltinDetector("names the link or switch that loses probes (and, lossless, the port that "
                                       "pauses for good)", "probes", _probe_localizer))
