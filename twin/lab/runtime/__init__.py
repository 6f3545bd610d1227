"""Runtimes: how a lab's nodes come to exist (network namespaces, or Docker containers).
`get_runtime` is called where a lab is built or torn down (lab/deploy.py) and where a running
lab is opened (lab/handle.py); everything else gets the runtime from its `Lab`."""

from __future__ import annotations

from collections.abc import Callable

from twin.lab.runtime.base import ExecResult, Runtime
from twin.registry import Registry

RuntimeFactory = Callable[[str], Runtime]  # lab name -> the runtime of that lab
RUNTIMES: Registry[RuntimeFactory] = Registry("runtime", plural="runtimes")


# Each runtime's module is imported when a lab runs on it: Docker's SDK cost every `twin` command
# 0.2 s of start-up, pyroute2 (netns) 0.1 s.
def _netns_runtime(lab: str) -> Runtime:
    from twin.lab.runtime.netns import NetnsRuntime

    return NetnsRuntime(lab)


RUNTIMES.add("netns", _netns_runtime)


def _docker_runtime(lab: str) -> Runtime:
    from twin.lab.runtime.docker import DockerRuntime

    return DockerRuntime(lab)


RUNTIMES.add("docker", _docker_runtime)


def names() -> list[str]:
    return RUNTIMES.names()


def get_runtime(name: str, lab: str) -> Runtime:
    return RUNTIMES.get(name)(lab)


__all__ = ["ExecResult", "RUNTIMES", "Runtime", "get_runtime", "names"]
