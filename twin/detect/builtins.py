"""Built-in detectors, in one list: a name, what it needs from the run, and how it attaches.

probe-localizer   the probe mesh's intervals through the greedy localizer (detect/localizer.py),
                  and on a lossless lab the PFC pause counters through the pause localizer
                  (detect/pauses.py)
probe-likelihood  the same evidence through the likelihood localizer (detect/likelihood.py)
config-audit      the lab's intent against each node's running configuration (detect/config_audit.py)
rank-health       the training job's ranks against each other: hung and slow ranks (detect/rank_health.py)
transport-state   the collective job's own transport losses (RoCE QPs, gloo's TCP connections) over
                  the paths the ranks discovered, no probe traffic (detect/transport_state.py)

A probe detector's localizer is made in one place (`localizer`), so `twin detect replay` runs
exactly what a live run attaches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twin.collectives.metrics import OPS
from twin.detect import config_audit, rank_health, transport_state
from twin.detect.likelihood import DETECTOR as LIKELIHOOD
from twin.detect.likelihood import LikelihoodLocalizer
from twin.detect.localizer import DETECTOR, Localizer
from twin.detect.pauses import PauseLocalizer
from twin.lab.pfc import published as pfc_counters
from twin.probes.mesh import PROBES_FILE
from twin.registry import Registry


@dataclass(frozen=True)
class BuiltinDetector:
    summary: str
    needs: str  # the workload it feeds on, as a scenario writes it ("": none): a scenario without one is refused
    attach: Callable  # (run: detect.live.Detectors, name: str) -> None
    localizer: Callable | None = None  # probe detectors: (fabric, report_s) -> observe(t, samples) -> verdicts
    fed_by: Callable[[dict], bool] | None = None  # which workload entries feed it (default: kind == needs)
    hint: str = ""  # how to give it what it needs (default: add the workload `needs` names)
    evidence: str = ""  # the results file `twin detect replay` runs it again on ("": not replayable)

    def feeds_on(self, workload: dict) -> bool:
        return self.fed_by(workload) if self.fed_by else workload.get("kind") == self.needs


def _probe_detector(make: Callable) -> Callable:
    """Attach a probe localizer to the run's probe mesh, with the pause localizer on a lossless lab."""
    def attach(run, name: str) -> None:
        probes = next(w for w in run.workloads if hasattr(w, "mesh"))
        fabric = run.lab.fabric
        localizer = make(fabric, probes.params.report_ms / 1000)
        pauses = PauseLocalizer(fabric) if fabric.pfc else None

        def on_interval(interval) -> None:
            now = run.events.now()
            for verdict in localizer.observe(now, interval.samples):
                run.emit(name, verdict, source="builtin")
            if pauses is not None:  # the pause counters, read as each probe interval is counted
                for verdict in pauses.observe(now, pfc_counters.ports(pfc_counters.read(run.lab.paths.root))):
                    run.emit(name, verdict, source="builtin")

        probes.mesh.listeners.append(on_interval)
    return attach


def greedy(fabric, report_s: float) -> Localizer:
    return Localizer.for_interval(fabric.switch_links(), report_s)


def likelihood(fabric, report_s: float) -> LikelihoodLocalizer:
    return LikelihoodLocalizer.for_interval(fabric.switch_links(), report_s)


COLLECTIVES = ("train", *OPS)  # the workload kinds whose ranks report their transport state

BUILTINS: Registry[BuiltinDetector] = Registry("builtin detector", plural="built-in detectors")
BUILTINS.add(DETECTOR, BuiltinDetector("names the link or switch that loses probes, greedily (and, lossless, the "
                                       "port that pauses for good)", "probes", _probe_detector(greedy), greedy,
                                       evidence=PROBES_FILE))
BUILTINS.add(LIKELIHOOD, BuiltinDetector("names the link or switch that loses probes by likelihood, when the "
                                         "evidence separates it from its rivals (and, lossless, the port that pauses "
                                         "for good)", "probes", _probe_detector(likelihood), likelihood,
                                         evidence=PROBES_FILE))
BUILTINS.add(config_audit.DETECTOR, BuiltinDetector("names the link or switch whose running configuration differs "
                                                    "from the lab's intent (BGP neighbours, multipath width, route "
                                                    "maps, hash policy, MTU)", "", config_audit.attach))
BUILTINS.add(rank_health.DETECTOR, BuiltinDetector("names the host of a training rank that hangs or computes "
                                                   "slowly, from the ranks' own records (the network is not at fault)",
                                                   "", rank_health.attach))
BUILTINS.add(transport_state.DETECTOR, BuiltinDetector("names the link whose RoCE QPs or TCP connections lose "
                                                       "packets, from the job's own transport state over the paths "
                                                       "its ranks discovered (no probe traffic)", "a collective",
                                                       transport_state.attach,
                                                       fed_by=lambda workload: workload.get("kind") in COLLECTIVES,
                                                       hint="add a collective workload, e.g. `- kind: allreduce` "
                                                            "(gloo's TCP, or `transport: roce`)",
                                                       evidence=transport_state.TRANSPORT_FILE))
