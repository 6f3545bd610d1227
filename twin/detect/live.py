"""Detectors during a run, live (`twin detect replay` runs them on a recorded folder): built-in ones
(detect/builtins.py) fed by the run's workloads, and external commands whose JSON-lines verdicts
are read from stdout. Every verdict becomes a `verdict` event timed when the runner receives it
(the detection latency an operator would see)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import replace

from twin.detect.builtins import BUILTINS
from twin.detect.specs import DetectorSpec
from twin.detect.verdicts import Verdict, is_ready_line, parse_line
from twin.events import EventLog
from twin.lab.handle import Lab, python_module
from twin.lab.state import Resource

ENV_VALUE_MAX = 100_000  # below the kernel's MAX_ARG_STRLEN (128 KiB) for one variable


class Detectors:
    def __init__(self, specs: list[DetectorSpec], workloads: list, lab: Lab, events: EventLog):
        self.specs, self.workloads, self.lab, self.events = specs, workloads, lab, events
        self._procs: list[tuple[str, subprocess.Popen, Resource]] = []
        self._threads: list[threading.Thread] = []
        self.stopping = threading.Event()  # set when the run ends: polling detectors return
        self._ready: dict[str, threading.Event] = {}  # watchers (ready_within_s) -> said ready, or exited
        self._exited_unready: set[str] = set()

    def start_watchers(self) -> None:
        """Start the commands that need time to watch (`ready_within_s`: a collector opening its
        subscriptions) before the scenario's clock, which `wait_watchers` then holds for them. They
        get no FABRIC_TWIN_START_EPOCH (the clock has not started): their verdicts are timed when
        received."""
        for number, spec in enumerate(self.specs):
            if spec.ready_within_s is not None:
                name = spec.label(number)
                self.events.emit("detector", op="start", detector=name, source="external")
                self._ready[name] = threading.Event()
                self._start_external(name, spec.command, None)

    @property
    def watchers(self) -> list[str]:
        return list(self._ready)

    def wait_watchers(self, each_done=lambda: None) -> None:
        """Until every watcher said `{"ready": true}`, each at most its `ready_within_s` from now; one
        that did not (or exited first: no longer waited for) is a `detector` event (`op: not_ready`) and
        the run goes on."""
        started = time.monotonic()
        for number, spec in enumerate(self.specs):
            name = spec.label(number)
            if name in self._ready:
                left = spec.ready_within_s - (time.monotonic() - started)
                if not self._ready[name].wait(max(0.0, left)) or name in self._exited_unready:
                    self.events.emit("detector", op="not_ready", detector=name, waited_s=spec.ready_within_s,
                                     exited=name in self._exited_unready)
                each_done()

    def start(self, scenario_start_wall: float) -> None:
        for number, spec in enumerate(self.specs):
            name = spec.label(number)
            if name in self._ready:
                continue  # a watcher, started before the clock
            self.events.emit("detector", op="start", detector=name, source="builtin" if spec.builtin else "external")
            if spec.builtin:
                BUILTINS.get(spec.builtin).attach(self, name)
            else:
                self._start_external(name, spec.command, scenario_start_wall)

    def _start_external(self, name: str, command: list[str], start_wall: float | None) -> None:
        lab, fabric = self.lab, self.lab.fabric
        argv = [part.replace("{lab}", fabric.name) for part in command]
        maps = {"nodes": {n: lab.runtime.resource_name(n) for n in fabric.nodes},
                "links": [{"name": link.name, "a": link.a.node, "a_if": link.a.ifname, "b": link.b.node,
                           "b_if": link.b.ifname}
                          for link in fabric.links]}
        topology = lab.paths.root / f"detector-{name}.topology.json"  # goes with the lab directory
        topology.write_text(json.dumps(maps))
        env = os.environ | {"FABRIC_TWIN_LAB": fabric.name, "FABRIC_TWIN_RUNTIME": lab.state.runtime,
                            "FABRIC_TWIN_TOPOLOGY": str(topology)}
        env.pop("FABRIC_TWIN_START_EPOCH", None)  # never the runner's own environment's
        if start_wall is not None:
            env["FABRIC_TWIN_START_EPOCH"] = f"{start_wall:.3f}"
        # The maps in the environment too, where they fit: the kernel refuses a variable over
        # 128 KiB (pod128's links are 230 KB), and the command would not start at all.
        for key, value in (("FABRIC_TWIN_NODES", maps["nodes"]), ("FABRIC_TWIN_LINKS", maps["links"])):
            text = json.dumps(value)
            if len(text) < ENV_VALUE_MAX:
                env[key] = text
        spawned = lab.spawn_owned(f"detector/{name}", python_module("twin.detect.external", str(lab.paths.root),
                                                                    "--", *argv),
                                  lab.paths.root / f"detector-{name}.log", env=env, pipe_stdout=True)
        self._procs.append((name, spawned.proc, spawned.resource))
        thread = threading.Thread(target=self._read, args=(name, spawned.proc), daemon=True, name=f"detector-{name}")
        thread.start()
        self._threads.append(thread)

    def _read(self, name: str, proc: subprocess.Popen) -> None:
        ready = self._ready.get(name)
        for line in proc.stdout:
            if ready is not None and is_ready_line(line):
                ready.set()
                continue
            verdict = parse_line(line, name, self.events.now())
            if verdict is not None and ready is not None:  # it has no epoch: its own t means nothing here
                verdict = replace(verdict, t=self.events.now())
            if verdict is not None:
                self.emit(name, verdict, source="external", received_t=self.events.now())
        if ready is not None and not ready.is_set():  # it exited before it watched: wait no longer
            self._exited_unready.add(name)
            ready.set()

    def emit(self, name: str, verdict: Verdict, **extra) -> None:
        self.events.emit("verdict", t=verdict.t, detector=name, **verdict.fields(), **extra)

    def poll(self, name: str, loop) -> None:
        """Run a built-in detector's `loop(stopping)` in a thread of the run until the run ends."""
        thread = threading.Thread(target=loop, args=(self.stopping,), daemon=True, name=f"detector-{name}")
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for _name, proc, _resource in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.lab.forget([resource for _n, _p, resource in self._procs])
        for thread in self._threads:
            thread.join(timeout=2)
        self._keep_logs()

    def _keep_logs(self) -> None:
        """An external detector's stderr goes with the run's results (the lab directory, where it
        was written, goes at teardown): a tool that failed says why there."""
        for name, proc, _resource in self._procs:
            log = self.lab.paths.root / f"detector-{name}.log"
            if log.is_file():
                shutil.copyfile(log, self.events.path.parent / f"detector-{name}.log")
            if proc.returncode not in (0, None, -15):
                self.events.emit("detector", op="failed", detector=name, exit=proc.returncode,
                                 log=f"detector-{name}.log")
