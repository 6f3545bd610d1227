"""What every fault kind shares: the spec model, target resolution, the context it acts in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from twin.errors import TwinError
from twin.model.fabric import Endpoint, Fabric, Link, link_key
from twin.lab.runtime import Runtime
from twin.lab.state import LabState
from twin.spec.yamlsrc import closest

FAULT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,23}$"
COMMON_KEYS = ("id", "kind", "at_s", "duration_s")


class Params(BaseModel):
    """Kind-specific keys of a fault entry; each kind subclasses this."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkParams(Params):
    link: str = Field(description='the link between two nodes, e.g. "leaf-g1-r1 -- spine-r1-s1"')
    direction: Literal["a_to_b", "b_to_a", "both"] = Field(
        "both", description="a_to_b | b_to_a | both (a and b as written in `link`)")


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=FAULT_ID_PATTERN, description="a short name for the fault, e.g. bad-optic")
    kind: str = Field(description="the fault kind")
    at_s: float = Field(0.0, ge=0, description="seconds after the scenario starts")
    duration_s: float | None = Field(None, gt=0, description="seconds it lasts; omitted = until the end")


@dataclass
class FaultContext:
    runtime: Runtime
    state: LabState
    fabric: Fabric
    seed: int = 1


class TargetError(TwinError):
    pass


def resolve_node(fabric: Fabric, name: str, roles: tuple[str, ...] | None = None) -> str:
    if name not in fabric.nodes:
        guess = closest(name, sorted(fabric.nodes))
        raise TargetError(f"lab {fabric.name} has no node '{name}'",
                          hint=(f"did you mean '{guess}'? " if guess else "") + f"see `twin lab show {fabric.name}`")
    if roles and fabric.nodes[name].role not in roles:
        raise TargetError(f"{name} is a {fabric.nodes[name].role}; this fault needs a {' or '.join(roles)}")
    return name


def resolve_link(fabric: Fabric, text: str) -> tuple[Link, str, str]:
    """'a -- b' (either order) -> (the link, a, b) with a and b as written."""
    parts = [p.strip() for p in text.split("--")]
    if len(parts) != 2 or not all(parts):
        raise TargetError(f"'{text}' is not a link", hint='write it as "node-a -- node-b"')
    a, b = (resolve_node(fabric, p) for p in parts)
    link = fabric.find_link(a, b)
    if link is None:
        neighbours = sorted(l.peer(a).node for l in fabric.links_of(a))
        raise TargetError(f"there is no link between {a} and {b}",
                          hint=f"{a} connects to: {', '.join(neighbours)}")
    return link, a, b


def receiving_ends(link: Link, a: str, b: str, direction: str) -> list[Endpoint]:
    """The endpoints whose ingress sees the affected traffic (a_to_b: b's end receives)."""
    ends = {"a_to_b": [b], "b_to_a": [a], "both": [a, b]}[direction]
    return [link.endpoint(node) for node in ends]


class FaultKind(Protocol):
    name: ClassVar[str]
    params: ClassVar[type[Params]]

    def targets(self, fabric: Fabric, params: Any) -> list[str]:
        """Names of what the fault touches (links 'a -- b' sorted, or nodes), for overlap checks."""

    def apply(self, ctx: FaultContext, fault_id: str, params: Any, record: dict) -> None:
        """Inject the fault, filling `record` (kept in the lab state) with what `clear` needs."""

    def clear(self, ctx: FaultContext, fault_id: str, params: Any, record: dict) -> None: ...


class OnLink:
    """For kinds whose params name a `link`: the fault touches that link."""

    def targets(self, fabric: Fabric, params: Any) -> list[str]:
        return [link_key(resolve_link(fabric, params.link)[0].name)]
