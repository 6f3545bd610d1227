"""The container runtime: one Docker container per node, from the switch or host image.

Containers start with no network (`--network none`). Each container's network namespace is
attached as /run/netns/ftw-<lab>.<node>, where the netns runtime keeps its namespaces, so links
(veth pairs created straight into the two namespaces), addresses, shaping, telemetry and every
fault act on it unchanged. The lab's run directory is bound into every container at the same
path, so FRR configs, sockets, state and the collectives' FileStore work from both sides.

Processes run inside the container: `nsenter` into its mount, UTS, IPC, network and pid
namespaces, then join its cgroups (so `docker top` lists them, `docker stats` counts them and
`docker rm` ends them). The lab state records the process's host pid, and teardown ends it by
that pid, as on the netns runtime.

Ownership: the container name carries the lab's prefix, and labels name the lab and the node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
from docker.errors import DockerException, ImageNotFound, NotFound
from pyroute2 import netns as pr_netns

from twin.errors import RuntimeBackendError
from twin.lab.kernel.nsutil import pids_in_netns
from twin.lab.runtime.base import ExecResult
from twin.lab.runtime.images import SOURCE_LABEL, image_for, image_kind, source_digest
from twin.lab.runtime.netns import NetnsRuntime
from twin.lab.state import lab_dir
from twin.model.fabric import Node
from twin.names import is_lab_name
from twin.procs import alive, children, terminate

LABEL_LAB = "fabric-twin.lab"
LABEL_NODE = "fabric-twin.node"
# The host image's interpreter (with torch and the project); the switch image has FRR on PATH.
IMAGE_PYTHON = "/opt/venv/bin/python"
IMAGE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# For what a person runs with `docker exec`; the twin's own processes enter with its own
# credentials. Not --privileged: it asks for every capability, which a confined host refuses.
CAPABILITIES = ["NET_ADMIN", "NET_RAW"]
NO_DAEMON_HINT = "start Docker (`systemctl start docker`, or `dockerd &`), or use the default netns runtime"


def client() -> docker.DockerClient:
    try:
        found = docker.from_env(timeout=120)
        found.ping()
    except DockerException as exc:
        raise RuntimeBackendError(f"cannot reach the Docker daemon: {exc}", hint=NO_DAEMON_HINT) from None
    return found


def daemon_running() -> bool:
    try:
        client().close()
    except RuntimeBackendError:
        return False
    return True


def labelled_containers(lab: str | None = None) -> list:
    """This tool's containers (of one lab, or of every lab); none when there is no daemon."""
    try:
        found = client()
    except RuntimeBackendError:
        return []
    wanted = f"{LABEL_LAB}={lab}" if lab else LABEL_LAB
    try:
        return found.containers.list(all=True, filters={"label": wanted})
    finally:
        found.close()


def container_labs() -> set[str]:
    return {c.labels[LABEL_LAB] for c in labelled_containers() if is_lab_name(c.labels[LABEL_LAB])}


def check_image(api: docker.DockerClient, kind: str) -> str:
    name = image_for(kind)
    try:
        image = api.images.get(name)
    except ImageNotFound:
        raise RuntimeBackendError(f"the {kind} image {name} is not built", hint="run `make images`") from None
    if kind == "host" and image.labels.get(SOURCE_LABEL) != source_digest():
        # The host image runs the project's own agents and workers: they must be this code.
        raise RuntimeBackendError(f"the host image {name} was built from other sources than this code",
                                  hint="run `make images` (rebuilds only the project layer)")
    return name


class DockerRuntime(NetnsRuntime):
    kind = "docker"

    def __init__(self, lab: str):
        super().__init__(lab)
        self._api: docker.DockerClient | None = None
        self._pids: dict[str, int] = {}

    @property
    def api(self) -> docker.DockerClient:
        if self._api is None:
            self._api = client()
        return self._api

    def preflight(self, nodes: list[Node]) -> None:
        for kind in sorted({image_kind(node.is_switch) for node in nodes}):
            check_image(self.api, kind)

    def create_node(self, node: Node) -> None:
        name = self.resource_name(node.name)
        if os.path.exists(self.netns_path(node.name)):
            raise RuntimeBackendError(f"network namespace {name} already exists",
                                      hint=f"another run of lab '{self.lab}' left it: twin lab down {self.lab}")
        image = image_for(image_kind(node.is_switch))  # checked by preflight
        run_dir = str(lab_dir(self.lab))
        try:
            container = self.api.containers.run(
                image, name=name, hostname=node.name, detach=True, network_mode="none", cap_add=CAPABILITIES,
                labels={LABEL_LAB: self.lab, LABEL_NODE: node.name}, command=["sleep", "infinity"],
                volumes={run_dir: {"bind": run_dir, "mode": "rw"}})
            container.reload()
            pid = container.attrs["State"]["Pid"]
            pr_netns.attach(name, pid)
        except (DockerException, OSError) as exc:
            raise RuntimeBackendError(f"cannot start container {name}: {exc}") from exc
        self._pids[node.name] = pid

    def delete_node(self, name: str) -> None:
        container_pid = self._container_pid(name, required=False)
        # The node's processes end by their pids first (FRR writes its state on SIGTERM); the
        # container's own `sleep` is its pid 1 and ignores SIGTERM, so it goes with the container.
        terminate([p for p in pids_in_netns(self.netns_path(name)) if p != container_pid])
        try:
            self.api.containers.get(self.resource_name(name)).remove(force=True)
        except NotFound:
            pass
        except DockerException as exc:
            raise RuntimeBackendError(f"cannot remove container {self.resource_name(name)}: {exc}") from exc
        self._pids.pop(name, None)
        if os.path.exists(self.netns_path(name)):
            pr_netns.remove(self.resource_name(name))

    def exec(self, node: str, argv: list[str], timeout: float | None = 30,
             capture: bool = True, input: str | None = None) -> ExecResult:
        pipe = subprocess.PIPE if capture else None
        # Own session: on a timeout the whole group goes (nsenter and the command it forked).
        with subprocess.Popen(self._enter(node) + self._in_image(argv), stdout=pipe, stderr=pipe,
                              stdin=subprocess.PIPE if input is not None else None, text=True,
                              env=self._env(), start_new_session=capture) as proc:
            try:
                stdout, stderr = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise RuntimeBackendError(f"{' '.join(argv)} on {node} timed out after {timeout} s") from None
        return ExecResult(proc.returncode, stdout or "", stderr or "")

    def spawn(self, node: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> int:
        # `env` is for host paths (frr.daemon_env), which a container does not have: not passed.
        with open(log, "ab") as out:
            proc = subprocess.Popen(self._enter(node) + self._in_image(argv), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=out, start_new_session=True, env=self._env())
        # nsenter forks the command into the container's pid namespace and waits for it: the
        # lab records (and teardown signals) the command itself, which has a host pid too.
        pid = self._forked(proc)
        for member in (proc.pid, pid):
            self._join_cgroups(node, member)
        return pid

    @staticmethod
    def _forked(proc: subprocess.Popen, timeout_s: float = 5.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = children(proc.pid)
            if found:
                return found[0]
            if proc.poll() is not None:
                raise RuntimeBackendError(f"nsenter exited with {proc.returncode} before starting the command")
            time.sleep(0.002)
        proc.kill()
        raise RuntimeBackendError(f"nsenter did not start the command within {timeout_s} s")

    def owned(self) -> list[str]:
        # Containers only: a namespace whose container is gone is the netns runtime's to remove.
        return sorted(c.labels[LABEL_NODE] for c in labelled_containers(self.lab))

    def container_pid(self, node: str) -> int:
        return self._container_pid(node, required=True)

    def _container_pid(self, node: str, required: bool) -> int | None:
        pid = self._pids.get(node)
        if pid and alive(pid):
            return pid
        try:
            container = self.api.containers.get(self.resource_name(node))
            pid = container.attrs["State"]["Pid"] if container.status == "running" else 0
        except NotFound:
            pid = 0
        except RuntimeBackendError:
            if required:
                raise
            pid = 0
        if not pid:
            if required:
                raise RuntimeBackendError(f"node {node} of lab {self.lab} is not running (no container "
                                          f"{self.resource_name(node)})", hint=f"twin lab down {self.lab}")
            return None
        self._pids[node] = pid
        return pid

    def _enter(self, node: str) -> list[str]:
        return ["nsenter", f"--target={self.container_pid(node)}", "--mount", "--uts", "--ipc", "--net",
                "--pid", "--"]  # entering a pid namespace, nsenter forks the command

    @staticmethod
    def _in_image(argv: list[str]) -> list[str]:
        """The caller's Python means the image's (same project, checked by source digest)."""
        return [IMAGE_PYTHON, *argv[1:]] if argv and argv[0] == sys.executable else argv

    @staticmethod
    def _env() -> dict[str, str]:
        return {**os.environ, "PATH": IMAGE_PATH}

    def _join_cgroups(self, node: str, pid: int) -> None:
        for path in cgroup_dirs(self.container_pid(node)):
            try:
                (path / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # the process already exited, or a hierarchy refuses it: it still runs


def cgroup_dirs(pid: int) -> list[Path]:
    """The cgroup directories of `pid` in every mounted hierarchy (v1 and v2)."""
    dirs = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if controllers == "":
            base = Path("/sys/fs/cgroup") if Path("/sys/fs/cgroup/cgroup.controllers").exists() \
                else Path("/sys/fs/cgroup/unified")
        else:
            base = Path("/sys/fs/cgroup") / controllers.replace("name=", "")
        if (base / path.lstrip("/")).is_dir():
            dirs.append(base / path.lstrip("/"))
    return dirs
