"""Verdicts and what makes one right: it names a link or node the fault touched."""

from __future__ import annotations

from dataclasses import dataclass

from twin.model.targets import Target


@dataclass(frozen=True)
class Verdict:
    t: float
    detector: str
    kind: str | None = None
    link: str | None = None
    node: str | None = None
    confidence: float | None = None

    @property
    def target(self) -> Target:
        return Target.parse(self.link) if self.link else Target.node(self.node or "")


def names_fault(verdict: Verdict, targets: list[str]) -> bool:
    """Right when it names a target link, a target node, or a link of a target node (a node
    fault shows on that node's links: the probes cannot see inside the switch)."""
    return any(verdict.target.names(Target.parse(t)) for t in targets)


def parse_line(line: str, detector: str, received_t: float) -> Verdict | None:
    """One JSON line of a detector's output; lines that are not verdicts give None."""
    import json

    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not (obj.get("link") or obj.get("node")):
        return None
    t = obj.get("t")
    return Verdict(t=float(t) if isinstance(t, (int, float)) else received_t, detector=detector,
                   kind=obj.get("kind"), link=obj.get("link"), node=obj.get("node"),
                   confidence=obj.get("confidence"))
