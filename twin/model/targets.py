"""What a fault touches, a detector names and a trainee answers: a link of the fabric or a node.

Written in files and records as text: a node's name, or a link as "a -- b" (either order; the
canonical form sorts the two ends). `Target.parse` is the one place that tells them apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.errors import TwinError, closest
from twin.model.fabric import Endpoint, Fabric, Link, link_key

LINK_SEPARATOR = "--"


class TargetError(TwinError):
    """A fault names something the lab does not have; `key` is the fault's key it is about, where
    that is not the node or link named in the message."""

    def __init__(self, message: str, hint: str | None = None, key: str | None = None):
        super().__init__(message, hint)
        self.key = key


@dataclass(frozen=True, order=True)
class Target:
    nodes: tuple[str, ...]  # one node, or a link's two ends sorted

    @classmethod
    def parse(cls, text: str) -> Target:
        if LINK_SEPARATOR in text:
            ends = [part.strip() for part in text.split(LINK_SEPARATOR)]
            if len(ends) != 2 or not all(ends):
                raise TargetError(f"'{text}' is not a link", hint='write it as "node-a -- node-b"')
            return cls(tuple(sorted(ends)))
        if not text.strip():
            raise TargetError("an empty name is not a node")
        return cls((text.strip(),))

    @classmethod
    def node(cls, name: str) -> Target:
        return cls((name,))

    @classmethod
    def link(cls, a: str, b: str) -> Target:
        return cls(tuple(sorted((a, b))))

    @property
    def is_link(self) -> bool:
        return len(self.nodes) == 2

    @property
    def key(self) -> str:
        """The canonical text: what records and reports store."""
        return f" {LINK_SEPARATOR} ".join(self.nodes)

    def __str__(self) -> str:
        return self.key

    def names(self, fault: Target) -> bool:
        """A verdict naming `self` is right about a fault on `fault`: the same target, or a link of
        the faulty node (a node fault shows on the node's links: probes cannot see inside it)."""
        return self == fault or (self.is_link and not fault.is_link and fault.nodes[0] in self.nodes)


def resolve_node(fabric: Fabric, name: str, roles: tuple[str, ...] | None = None) -> str:
    if name not in fabric.nodes:
        guess = closest(name, sorted(fabric.nodes))
        raise TargetError(f"lab {fabric.name} has no node '{name}'",
                          hint=(f"did you mean '{guess}'? " if guess else "") + f"see `twin lab show {fabric.name}`")
    if roles and fabric.nodes[name].role not in roles:
        raise TargetError(f"{name} is a {fabric.nodes[name].role}; this needs a {' or '.join(roles)}",
                          hint=f"name a {' or '.join(roles)} (`twin lab show {fabric.name}` lists them)")
    return name


def resolve_link(fabric: Fabric, text: str) -> tuple[Link, str, str]:
    """'a -- b' (either order) -> (the link, a, b) with a and b as written."""
    parts = [p.strip() for p in text.split(LINK_SEPARATOR)]
    if len(parts) != 2 or not all(parts):
        raise TargetError(f"'{text}' is not a link", hint='write it as "node-a -- node-b"')
    a, b = (resolve_node(fabric, p) for p in parts)
    link = fabric.find_link(a, b)
    if link is None:
        neighbours = sorted(link.peer(a).node for link in fabric.links_of(a))
        raise TargetError(f"there is no link between {a} and {b}",
                          hint=f"{a} connects to: {', '.join(neighbours)}")
    return link, a, b


def resolve(fabric: Fabric, text: str) -> Target:
    """A link or node of this fabric, checked (errors say what exists)."""
    target = Target.parse(text)
    if target.is_link:
        resolve_link(fabric, text)
    else:
        resolve_node(fabric, target.nodes[0])
    return target


def receiving_ends(link: Link, a: str, b: str, direction: str) -> list[Endpoint]:
    """The endpoints whose ingress sees the affected traffic (a_to_b: b's end receives)."""
    ends = {"a_to_b": [b], "b_to_a": [a], "both": [a, b]}[direction]
    return [link.endpoint(node) for node in ends]


__all__ = ["Target", "TargetError", "link_key", "receiving_ends", "resolve", "resolve_link", "resolve_node"]
