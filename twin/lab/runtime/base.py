"""The Runtime protocol: how nodes and links of one lab come to exist.

Everything above it (addresses, shaping, FRR, faults) acts on a node's network
namespace through `netns_path`, so it works the same on every runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from twin.model.fabric import Link, Node


@dataclass(frozen=True)
class ExecResult:
    rc: int
    stdout: str
    stderr: str


class Runtime(Protocol):
    kind: str

    def preflight(self, nodes: list[Node]) -> None:
        """Raise if these nodes cannot be created (checked before anything is)."""

    def create_node(self, node: Node) -> None: ...

    def delete_node(self, name: str) -> None:
        """Remove the node and end every process in it; a node that is gone is fine."""

    def create_link(self, link: Link) -> None: ...

    def create_links(self, links: list[Link], done: Callable[[], None]) -> None:
        """create_link for each, calling done() after each one."""

    def netns_path(self, node: str) -> str: ...

    def exec(self, node: str, argv: list[str], timeout: float | None = 30,
             capture: bool = True, input: str | None = None) -> ExecResult: ...

    def spawn(self, node: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> int:
        """Start a long-running process in the node, detached from the caller; return its pid.
        `env`: its whole environment (default: the caller's)."""

    def owned(self) -> list[str]:
        """Names of the nodes of this lab that exist on the machine right now."""

    def resource_name(self, node: str) -> str:
        """The machine-wide name of the node's kernel object (namespace or container)."""
