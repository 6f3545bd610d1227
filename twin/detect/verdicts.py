"""Verdicts and what makes one right: it names a link or node the fault touched.

A set verdict (`links`: two or more candidates) says the probes could not tell those links apart:
it is right when it holds the fault and is no bigger than what the run's probe plan leaves
ambiguous (one of the plan's indistinguishable classes, `probes.select`), never a wider net."""

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
    links: tuple[str, ...] = ()  # a set verdict's candidates (then `link` and `node` are None)

    @property
    def target(self) -> Target:
        return Target.parse(self.link) if self.link else Target.node(self.node or "")

    @property
    def names(self) -> tuple[str, ...]:
        """What it names: its candidates, or its one link or node."""
        return self.links or ((self.link or self.node or ""),)

    def fields(self) -> dict:
        """What a `verdict` record of events.jsonl holds of it (the runner's and a replay's)."""
        return {"verdict_kind": self.kind, "link": self.link, "node": self.node, "confidence": self.confidence,
                **({"links": list(self.links)} if self.links else {})}

    @classmethod
    def from_record(cls, record: dict) -> Verdict:
        """A `verdict` record back, timed when the runner received it."""
        return cls(t=record.get("received_t", record["t"]), detector=record.get("detector", ""),
                   kind=record.get("verdict_kind"), link=record.get("link"), node=record.get("node"),
                   confidence=record.get("confidence"), links=tuple(record.get("links") or ()))


def names_fault(verdict: Verdict, targets: list[str], ambiguous: list[set[str]] | None = None) -> bool:
    """Right when it names a target link, a target node, or a link of a target node (a node
    fault shows on that node's links: the probes cannot see inside the switch). A set verdict:
    when one candidate does, and the set lies within one of `ambiguous` (the probe plan's classes)."""
    if verdict.links:
        candidates = {Target.parse(name).key for name in verdict.links}
        honest = any(candidates <= {Target.parse(name).key for name in group} for group in ambiguous or [])
        return honest and any(Target.parse(name).names(Target.parse(t)) for name in verdict.links for t in targets)
    return any(verdict.target.names(Target.parse(t)) for t in targets)


def is_ready_line(line: str) -> bool:
    """A detector's `{"ready": true}`: it watches now (DetectorSpec.ready_within_s)."""
    import json

    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("ready") is True


def parse_line(line: str, detector: str, received_t: float) -> Verdict | None:
    """One JSON line of a detector's output; lines that are not verdicts give None."""
    import json

    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    links = obj.get("links")
    links = tuple(links) if isinstance(links, list) and links and all(isinstance(x, str) for x in links) else ()
    if len(links) == 1:  # a set of one is that link
        obj["link"], links = links[0], ()
    if not (links or obj.get("link") or obj.get("node")):
        return None
    t = obj.get("t")
    return Verdict(t=float(t) if isinstance(t, (int, float)) else received_t, detector=detector,
                   kind=obj.get("kind"), link=None if links else obj.get("link"),
                   node=None if links else obj.get("node"), confidence=obj.get("confidence"), links=links)
