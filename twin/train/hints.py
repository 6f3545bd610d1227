"""Progressive hints: what to look at (from the fault kind's runbook), then where."""

from __future__ import annotations

import re

from twin.errors import TwinError
from twin.faults.registry import FAULTS
from twin.model.fabric import Fabric
from twin.train.pools import answer_of


def runbook_hints(kind: str) -> list[str]:
    """The bullets of the runbook's `## Hints` section, in order."""
    path = FAULTS.get(kind).runbook
    if not path.is_file():
        raise TwinError(f"no runbook for fault kind {kind}: {path}", hint="docs/runbooks/ ships with the project")
    text = path.read_text()
    section = re.search(r"^## Hints\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return [line[2:].strip() for line in section.group(1).splitlines() if line.startswith("- ")] if section else []


def _area(fabric: Fabric, entry: dict) -> str:
    answer = answer_of(entry)
    if answer.link:
        roles = sorted({fabric.nodes[n.strip()].role for n in answer.link.split("--")})
        return f"Look at the links between the {' and '.join(roles)} tiers."
    role = fabric.nodes[answer.node].role
    return f"Look at the {role}s: one {role} is the problem, not a link between two boxes."


def _end(fabric: Fabric, entry: dict) -> str:
    answer = answer_of(entry)
    if answer.link:
        return f"One end of it is {answer.link.split(' -- ')[0]}."
    node = fabric.nodes[answer.node]
    where = [f"group {node.group}"] * bool(node.group) + [f"rail {node.rail}"] * bool(node.rail)
    return f"It is in {', '.join(where)}." if where else f"It is {node.role} number {node.index}."


def hint(fabric: Fabric, entry: dict, number: int) -> str | None:
    """Hint `number` (0-based) for the fault `entry`, or None when there are no more."""
    book = runbook_hints(entry["kind"])
    sequence = [*book[:1], _area(fabric, entry), *book[1:2], _end(fabric, entry)]
    return sequence[number] if number < len(sequence) else None
