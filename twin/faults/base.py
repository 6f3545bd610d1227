"""What every fault kind shares: the spec model, target resolution, the context it acts in."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from twin.lab.handle import Lab
from twin.model.fabric import Fabric, link_key
from twin.model.targets import resolve_link, resolve_node

FAULT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,23}$"
COMMON_KEYS = ("id", "kind", "at_s", "duration_s")
# The timeline keeps time to milliseconds, but applying a fault takes up to ~100 ms on a busy lab
# (an nft table, a netlink round per port): a 1 us fault would be cleared before it took hold.
MIN_FAULT_S = 0.1


class Params(BaseModel):
    """Kind-specific keys of a fault entry; each kind subclasses this."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def drawable_share(value: float | None, key: str) -> float | None:
    """A percentage in 0.01 % steps, as the lab file format has always taken them (nftables drew
    them mod 10000; the ports' physical layer draws in parts per million, lab/ports/phy.py)."""
    if value is not None and (value < 0.01 or abs(value * 100 - round(value * 100)) > 1e-6):
        lower, upper = int(value * 100) / 100, (int(value * 100) + 1) / 100
        nearest = ", ".join(str(v) for v in (lower, upper) if v >= 0.01)
        raise ValueError(f"{key} {value} cannot be expressed: shares are drawn in 0.01 % steps "
                         f"(nearest: {nearest})")
    return value


class LinkParams(Params):
    link: str = Field(description='the link between two nodes, e.g. "leaf-g1-r1 -- spine-r1-s1"')
    direction: Literal["a_to_b", "b_to_a", "both"] = Field(
        "both", description="a_to_b | b_to_a | both (a and b as written in `link`)")


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    id: str = Field(pattern=FAULT_ID_PATTERN, description="a short name for the fault, e.g. bad-optic")
    kind: str = Field(description="the fault kind")
    at_s: float = Field(0.0, ge=0, description="seconds after the scenario starts")
    duration_s: float | None = Field(None, ge=MIN_FAULT_S, description=f"seconds it lasts, at least {MIN_FAULT_S} "
                                     "(a shorter fault is cleared before it takes hold); omitted = until the end")


@dataclass
class FaultContext:
    """A running lab plus the seed a fault's random choices derive from."""
    lab: Lab
    seed: int = 1


RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


class FaultKind(Protocol):
    name: ClassVar[str]
    params: ClassVar[type[Params]]
    place: ClassVar[str]  # "link" or "node": where an operator finds it (and a trainee answers)
    training_level: ClassVar[int | None]  # the training level that hides it (train/pools.py), if any

    @property
    def summary(self) -> str: ...

    def training_entry(self, fabric: Fabric, rng, links: list[str]) -> dict:
        """Kinds with a training_level: one fault entry of this kind for a hidden exercise
        (keys after `kind`; `links`: the fabric links the level draws from)."""

    @property
    def runbook(self) -> Path: ...

    def targets(self, fabric: Fabric, params: Any) -> list[str]:
        """Names of what the fault touches (links 'a -- b' sorted, or nodes), for overlap checks."""

    def apply(self, ctx: FaultContext, fault_id: str, params: Any, record: dict) -> None:
        """Inject the fault, filling `record` (kept in the lab state) with what `clear` needs."""

    def clear(self, ctx: FaultContext, fault_id: str, params: Any, record: dict) -> None: ...


class Kind:
    """What every kind says about itself, read by help text, training and docs."""

    training_level: ClassVar[int | None] = None
    # On a split lab's share: whether acting on the ends of a link this machine runs is the whole
    # fault (link_down), or every node it touches must run here (faults/engine.py).
    one_end_suffices: ClassVar[bool] = False

    @property
    def summary(self) -> str:
        """The first line of the kind's module docstring, after "name: "."""
        doc = sys.modules[type(self).__module__].__doc__ or ""
        return doc.split("\n\n")[0].replace("\n", " ").split(": ", 1)[-1].strip()

    @property
    def runbook(self) -> Path:
        """The operator's runbook for this fault: symptoms, what reveals it, mitigation, hints."""
        return RUNBOOKS / f"{self.name.replace('_', '-')}.md"

    def trainable(self, fabric: Fabric) -> bool:
        """Whether a training level may draw this kind on `fabric` (a miswire needs two NICs a host)."""
        return True

    def check(self, fabric: Fabric, params: Any, lasts_s: float | None) -> list[tuple[str, str, str]]:
        """(key, message, hint) for parameters that valid on their own cannot work on this lab or for
        this long (`lasts_s`: None = until cleared by hand). Run before anything is applied."""
        return []


class OnLink(Kind):
    """For kinds whose params name a `link`: the fault touches that link."""

    place = "link"

    def targets(self, fabric: Fabric, params: Any) -> list[str]:
        return [link_key(resolve_link(fabric, params.link)[0].name)]


class OnNode(Kind):
    """For kinds whose params name a `node` of one of `roles`: the fault touches that node."""

    place = "node"
    roles: ClassVar[tuple[str, ...]]

    def targets(self, fabric: Fabric, params: Any) -> list[str]:
        return [resolve_node(fabric, params.node, roles=self.roles)]
