"""Detectors during a run: the built-in probe localizer fed by the probe workload, and external
commands whose JSON-lines verdicts are read from stdout. Every verdict becomes a `verdict` event
timed when the runner receives it (the detection latency an operator would see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from twin.lab.pfc import counters as pfc_counters
from twin.lab.state import Resource
from twin.detect.localizer import DETECTOR, Localizer
from twin.detect.pauses import PauseLocalizer
from twin.detect.verdicts import parse_line

BUILTINS = (DETECTOR,)


def detector_name(spec: dict, number: int) -> str:
    return spec.get("name") or spec.get("builtin") or f"external-{number}"


class Detectors:
    def __init__(self, specs: list[dict], workloads: list, ctx):
        self.specs, self.workloads, self.ctx = specs, workloads, ctx
        self._procs: list[tuple[str, subprocess.Popen, Resource]] = []
        self._threads: list[threading.Thread] = []

    def start(self, scenario_start_wall: float) -> None:
        for number, spec in enumerate(self.specs):
            name = detector_name(spec, number)
            self.ctx.events.emit("detector", op="start", detector=name,
                                 source="builtin" if spec.get("builtin") else "external")
            if spec.get("builtin") == DETECTOR:
                self._start_localizer(name)
            elif spec.get("command"):
                self._start_external(name, spec["command"], scenario_start_wall)

    def _start_localizer(self, name: str) -> None:
        probes = next(w for w in self.workloads if hasattr(w, "mesh"))
        fabric = self.ctx.fabric
        localizer = Localizer.for_interval(fabric.switch_links(), probes.params.report_ms / 1000)
        pauses = PauseLocalizer(fabric) if fabric.pfc else None

        def on_interval(interval) -> None:
            now = self.ctx.events.now()
            for verdict in localizer.observe(now, interval.samples):
                self._emit(name, verdict, source="builtin")
            if pauses is not None:  # the pause counters, read as each probe interval is counted
                for verdict in pauses.observe(now, pfc_counters.ports(pfc_counters.read(self.ctx.state.directory))):
                    self._emit(name, verdict, source="builtin")

        probes.mesh.listeners.append(on_interval)

    def _start_external(self, name: str, command: list[str], start_wall: float) -> None:
        state, fabric = self.ctx.state, self.ctx.fabric
        argv = [part.replace("{lab}", fabric.name) for part in command]
        env = os.environ | {
            "FABRIC_TWIN_LAB": fabric.name, "FABRIC_TWIN_RUNTIME": state.runtime,
            "FABRIC_TWIN_NODES": json.dumps({n: self.ctx.runtime.resource_name(n) for n in fabric.nodes}),
            "FABRIC_TWIN_LINKS": json.dumps([{"name": l.name, "a": l.a.node, "a_if": l.a.ifname,
                                              "b": l.b.node, "b_if": l.b.ifname} for l in fabric.links]),
            "FABRIC_TWIN_START_EPOCH": f"{start_wall:.3f}"}
        resource = state.record(Resource(kind="worker", name=f"detector/{name}"))
        log = open(state.directory / f"detector-{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "twin.detect.external", str(state.directory), "--", *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
                                text=True, start_new_session=True)
        log.close()
        resource.pid = proc.pid
        state.save()
        self._procs.append((name, proc, resource))
        thread = threading.Thread(target=self._read, args=(name, proc), daemon=True, name=f"detector-{name}")
        thread.start()
        self._threads.append(thread)

    def _read(self, name: str, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            verdict = parse_line(line, name, self.ctx.events.now())
            if verdict is not None:
                self._emit(name, verdict, source="external", received_t=self.ctx.events.now())

    def _emit(self, name: str, verdict, **extra) -> None:
        self.ctx.events.emit("verdict", t=verdict.t, detector=name, verdict_kind=verdict.kind,
                             link=verdict.link, node=verdict.node, confidence=verdict.confidence, **extra)

    def stop(self) -> None:
        for _name, proc, resource in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if resource in self.ctx.state.resources:
                self.ctx.state.resources.remove(resource)
        self.ctx.state.save()
        for thread in self._threads:
            thread.join(timeout=2)
