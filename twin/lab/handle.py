"""`Lab`: one running lab. Its model (as built, frozen), its state (what it owns), its runtime,
its files, and the few ways code outside lab/ touches it: netlink and sockets in a node, and
processes it owns.

Everything that acts on a running lab takes a `Lab` (faults and workloads: a Lab plus what is
specific to them). `Lab.open` is the one place a runtime is resolved for a running lab.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from socket import socket as Socket

from pyroute2 import IPRoute

from twin.errors import LabStateError, TwinError
from twin.lab import runtime as runtimes
from twin.lab.files import open_lab
from twin.lab.kernel.nsutil import in_netns, netlink_in, socket_in
from twin.lab.runtime import Runtime
from twin.lab.state import LabState, Resource, load_state
from twin.model import serialize
from twin.model.build import build_fabric
from twin.model.fabric import Fabric
from twin.names import is_lab_name
from twin.spec.labfile import load_lab


@dataclass(frozen=True)
class LabPaths:
    """Where a lab keeps its files: $FABRIC_TWIN_RUN_DIR/<lab>/ (removed by teardown)."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def model(self) -> Path:
        return self.root / "model.json"  # the model as built (model/serialize.py)

    @property
    def lab_file(self) -> Path:
        return self.root / "lab.yaml"  # a copy of the lab file as it was built

    @property
    def faults(self) -> Path:
        return self.root / "faults"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def training(self) -> Path:
        return self.root / "training"

    def node(self, node: str) -> Path:
        return self.root / "nodes" / node


class Lab:
    def __init__(self, fabric: Fabric, state: LabState, runtime: Runtime):
        self.fabric, self.state, self.runtime = fabric, state, runtime
        self.paths = LabPaths(state.directory)

    @classmethod
    def open(cls, name: str, refuse_in_training: str | None = None) -> Lab:
        """The lab `name` as it runs. refuse_in_training: what the caller is about to do, when it
        would give a training session's hidden fault away (inject by hand, diagnose, ...)."""
        state = load_state(name)
        if state is None:
            raise LabStateError(f"lab '{name}' is not running", hint=f"start it with `twin lab up {name}`")
        lab = cls(_saved_model(state), state, runtimes.get_runtime(state.runtime, name))
        if refuse_in_training:
            lab.refuse_in_training(refuse_in_training)
        return lab

    def reloaded(self) -> Lab:
        """The same lab with its state as now on disk (other commands change it: faults, drains)."""
        state = load_state(self.name)
        if state is None:
            raise LabStateError(f"lab '{self.name}' is no longer running")
        return Lab(self.fabric, state, self.runtime)

    @property
    def name(self) -> str:
        return self.fabric.name

    @property
    def in_training(self) -> bool:
        """A training session hides this lab's faults from the trainee (train/)."""
        return self.state.sealed

    def refuse_in_training(self, what: str) -> None:
        if self.in_training:
            raise TwinError(f"a training session is active on lab {self.name}: {what} is not available "
                            "during it", hint="find the fault with the fabric's own tools; `twin train hint`, "
                            "`twin train reveal`")

    def refuse_split(self, what: str) -> None:
        """For what needs every node of the lab on this machine: a split lab's share has only its own."""
        fabric = self.fabric
        if fabric.machine:
            raise TwinError(f"{self.name} is machine {fabric.machine}'s share of lab {fabric.split_of}, split over "
                            f"{fabric.machines} machines: {what} needs the whole lab on one machine",
                            hint="bring the lab up whole (without --machines) for it; status, faults and down "
                                 "work on each share")

    def visible_faults(self) -> list[dict] | None:
        """The active faults (engine records), or None while a training session hides them: the
        one place readers (lists, counters, the dashboard) learn what is injected."""
        return None if self.in_training else list(self.state.faults)

    def netns(self, node: str) -> str:
        return self.runtime.netns_path(node)

    def netlink(self, node: str, strict_check: bool = False) -> IPRoute:
        """A netlink socket in the node (a node torn down under us fails, never reappears empty).
        strict_check: dumps the kernel filters by the request's fields."""
        return netlink_in(self.netns(node), strict_check)

    @contextmanager
    def enter(self, node: str) -> Iterator[None]:
        """The calling thread inside the node's network namespace (sysctls, /proc/net, ethtool)."""
        with in_netns(self.netns(node)):
            yield

    def socket(self, node: str, kind: int, proto: int = 0) -> Socket:
        """An AF_INET socket that lives in the node, whichever thread uses it later."""
        return socket_in(self.netns(node), kind, proto)

    def spawn_owned(self, name: str, argv: list[str], log: Path, *, kind: str = "worker",
                    node: str | None = None, env: dict | None = None, pipe_stdout: bool = False,
                    pipe_stdin: bool = False) -> Spawned:
        """Start a process the lab owns: recorded in the state before it starts (teardown ends it
        by pid after a crash), in `node` or, without one, on the host in a session of its own.
        pipe_stdout / pipe_stdin: talk to it in text lines (host processes only)."""
        resource = self.state.record(Resource(kind=kind, name=name, node=node))
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = None
        if node is not None:
            resource.pid = self.runtime.spawn(node, argv, log)
        else:
            with open(log, "ab") as out:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE if pipe_stdin else subprocess.DEVNULL,
                                        env=env, start_new_session=True,
                                        stdout=subprocess.PIPE if pipe_stdout else out, stderr=out,
                                        text=pipe_stdout or pipe_stdin)
            resource.pid = proc.pid
        self.state.save()
        return Spawned(resource, proc)

    def forget(self, resources: list[Resource]) -> None:
        """Drop records of processes that have ended."""
        self.state.resources = [r for r in self.state.resources if r not in resources]
        self.state.save()

    def owned(self, kind: str, prefix: str) -> list[Resource]:
        return [r for r in self.state.resources if r.kind == kind and r.name.startswith(prefix)]


@dataclass
class Spawned:
    resource: Resource
    proc: subprocess.Popen | None  # host processes only; a node's process is known by pid

    @property
    def pid(self) -> int:
        return self.resource.pid


def python_module(module: str, *args: str) -> list[str]:
    """argv running one of twin's entry points with this interpreter."""
    return [sys.executable, "-m", module, *args]


def _saved_model(state: LabState) -> Fabric:
    paths = LabPaths(state.directory)
    if paths.model.is_file():
        return serialize.load(paths.model).with_runtime(state.runtime)
    if paths.lab_file.is_file():  # brought up by a version that saved only the lab file
        return build_fabric(load_lab(paths.lab_file, runtimes.names())).with_runtime(state.runtime)
    raise LabStateError(f"lab '{state.lab}' has no saved model (status: {state.status})",
                        hint=f"twin lab down {state.lab}")


def lab_model(ref: str) -> Fabric:
    """The model of a lab that is up, by name (as it runs: it may have come from any path);
    otherwise of a lab file, by name or path."""
    if is_lab_name(ref):
        state = load_state(ref)
        if state is not None:
            try:
                return _saved_model(state)
            except LabStateError:
                pass  # up, but no saved model (it failed early): the lab file is all there is
    return open_lab(ref)[1]
