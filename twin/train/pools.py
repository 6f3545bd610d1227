"""What a training level hides: fault entries drawn from the level's pool with a seeded rng.

Level 1: faults routing sees (link down, switch down, BGP session down).
Level 2: faults routing does not see (silent drop, bit flip, black hole, slow node).
Level 3: the hard ones: drops on a subset of flows only, PFC pause storms that spread, two
faults at once, faults on superspine links.
Level 4: misconfiguration and cabling, nine in ten of the incidents of the fabrics we twin: an MTU
push that missed a port, a multipath width, a hash policy, a wrong neighbour AS, a bad route map,
two NIC cables swapped (on labs with two NICs a host).
Level 5: not the network: a hung, crashed or throttling GPU behind the job's "network" timeout
or slow steps; the answer is the host (`--node`), and the fabric is innocent.
Which kinds belong to a level, and how each draws its parameters, the kinds say themselves
(`training_level`, `training_entry`: faults/).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from twin.faults import engine
from twin.faults.registry import FAULTS
from twin.model.fabric import Fabric, link_key

LEVELS = (1, 2, 3, 4, 5)
# The order a level's kinds are drawn in: the one sessions have used from the start, so a seed
# still gives the session it gave before (trainers hand out seeds). New kinds come after, by name.
DRAW_ORDER = ("link_down", "switch_down", "bgp_down", "silent_drop", "bitflip", "blackhole", "slow_node")


@dataclass(frozen=True)
class Answer:
    """Where a fault is, as a trainee would name it."""
    kind: str
    link: str | None = None
    node: str | None = None
    also: str | None = None  # another right place: a black hole's link toward its host

    def at(self, link: str | None, node: str | None) -> bool:
        return (link, node) == (self.link, self.node) or (link is not None and link == self.also)

    @property
    def where(self) -> str:
        return f"link {self.link}" if self.link else f"node {self.node}"


def answer_of(entry: dict) -> Answer:
    if FAULTS.get(entry["kind"]).place == "link":
        return Answer(entry["kind"], link=link_key(entry["link"]))
    also = link_key(f"{entry['node']} -- {entry['host']}") if entry.get("host") else None
    return Answer(entry["kind"], node=entry["node"], also=also)


def _fabric_links(fabric: Fabric, tier: str | None = None) -> list[str]:
    links = [link for link in fabric.links if link.kind != "host"]
    if tier:
        links = [link for link in links if tier in (fabric.nodes[link.a.node].role, fabric.nodes[link.b.node].role)]
    return sorted(link.name for link in links)


def _one_of_level(fabric: Fabric, rng: random.Random, level: int, links: list[str] | None = None) -> list[dict]:
    """One fault of a kind the registry puts at `level`, drawn with that kind's own choices."""
    kinds = sorted((name for name, k in FAULTS.items() if k.training_level == level and k.trainable(fabric)),
                   key=lambda n: (DRAW_ORDER.index(n) if n in DRAW_ORDER else len(DRAW_ORDER), n))
    kind = kinds[0] if len(kinds) == 1 else rng.choice(kinds)  # one kind: no draw, as before
    return [{"kind": kind, **FAULTS.get(kind).training_entry(fabric, rng, links or _fabric_links(fabric))}]


def _level1(fabric: Fabric, rng: random.Random) -> list[dict]:
    return _one_of_level(fabric, rng, 1)


def _level2(fabric: Fabric, rng: random.Random, links: list[str] | None = None) -> list[dict]:
    return _one_of_level(fabric, rng, 2, links)


def _level3(fabric: Fabric, rng: random.Random) -> list[dict]:
    choice = rng.choice(["flows", "storm", "two", "superspine"])
    if choice == "flows":
        return [{"kind": "silent_drop", "link": rng.choice(_fabric_links(fabric)), "direction": "both",
                 "loss_pct": 100, "flows_pct": rng.choice([10, 20])}]
    if choice == "storm":
        return _one_of_level(fabric, rng, 3)
    if choice == "superspine" and fabric.by_role("superspine"):
        return _level2(fabric, rng, _fabric_links(fabric, "superspine"))
    first = _level2(fabric, rng)
    for _attempt in range(20):  # a second fault that touches nothing the first does
        second = _level2(fabric, rng)
        if not set(_targets(first[0], fabric)) & set(_targets(second[0], fabric)):
            return first + second
    return first


def _targets(entry: dict, fabric: Fabric) -> list[str]:
    timing, params = engine.parse({"id": "x", **entry})
    return engine.targets(timing, params, fabric)


def _level4(fabric: Fabric, rng: random.Random) -> list[dict]:
    return _one_of_level(fabric, rng, 4)


def _level5(fabric: Fabric, rng: random.Random) -> list[dict]:
    return _one_of_level(fabric, rng, 5)


POOLS = {1: _level1, 2: _level2, 3: _level3, 4: _level4, 5: _level5}


def draw(fabric: Fabric, level: int, seed: int) -> list[dict]:
    """The hidden faults of a session: validated fault entries with ids t1, t2 (ids that say nothing)."""
    rng = random.Random(f"{fabric.name}/{level}/{seed}")
    entries = [{"id": f"t{number}", **entry} for number, entry in enumerate(POOLS[level](fabric, rng), 1)]
    for entry in entries:
        _targets(entry, fabric)  # every entry resolves on this lab
    return entries


def onset_delay_s(seed: int) -> float:
    """When the fault comes, after the training job and the probes are running: a surprise."""
    return round(random.Random(f"onset/{seed}").uniform(5.0, 15.0), 1)
