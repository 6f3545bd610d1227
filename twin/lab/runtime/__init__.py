"""Runtime registry: runtimes register by name; an unknown name lists the valid ones."""

from __future__ import annotations

from collections.abc import Callable

from twin.errors import TwinError
from twin.lab.runtime.base import ExecResult, Runtime
from twin.lab.runtime.docker import DockerRuntime
from twin.lab.runtime.netns import NetnsRuntime

RuntimeFactory = Callable[[str], Runtime]
_REGISTRY: dict[str, RuntimeFactory] = {}


def register(name: str, factory: RuntimeFactory) -> None:
    if name in _REGISTRY:
        raise ValueError(f"runtime {name!r} is already registered")
    _REGISTRY[name] = factory


def names() -> list[str]:
    return sorted(_REGISTRY)


def get_runtime(name: str, lab: str) -> Runtime:
    if name not in _REGISTRY:
        raise TwinError(f"unknown runtime '{name}'", hint=f"valid runtimes: {', '.join(names())}")
    return _REGISTRY[name](lab)


register("netns", NetnsRuntime)
register("docker", DockerRuntime)

__all__ = ["ExecResult", "Runtime", "get_runtime", "names", "register"]
