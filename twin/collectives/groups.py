"""Which host NICs take part in a collective, and in which ring order.

gloo's ring algorithms pass data from rank i to rank i+1, so the rank order is the ring.
`naive` takes NICs round-robin over leaves, as a scheduler that knows nothing of the fabric
might (with every NIC of every host taking part this is host-major, torchrun's numbering);
`topo` puts NICs under one leaf next to each other, so most ring hops stay below a leaf
and only one hop per leaf crosses the spines.
"""

from __future__ import annotations

from twin.model.fabric import Fabric
from twin.model.nics import Nic, fabric_nics

ORDERS = ("naive", "topo")


class RankSpecError(ValueError):
    key = "ranks"  # the scenario key it is about


def select_nics(fabric: Fabric, ranks: str | list[str]) -> list[Nic]:
    """`all`, `rail:N`, `hosts:H1,H2` or a list of `host:nic` labels -> NICs in naive order."""
    nics = sorted(fabric_nics(fabric), key=lambda n: (n.host, n.rail))
    if isinstance(ranks, list):
        by_label = {n.label: n for n in nics}
        unknown = [label for label in ranks if label not in by_label]
        if unknown:
            raise RankSpecError(f"unknown host NIC(s) {', '.join(unknown)}; e.g. {nics[0].label}")
        twice = sorted({label for label in ranks if ranks.count(label) > 1})
        if twice:
            raise RankSpecError(f"{', '.join(twice)} listed twice: a ring has one rank per NIC")
        chosen = [by_label[label] for label in ranks]
    elif ranks == "all":
        chosen = nics
    elif ranks.startswith("rail:"):
        rail = _int(ranks[5:], ranks)
        if not 1 <= rail <= fabric.rails:
            raise RankSpecError(f"{ranks}: the lab has rails 1..{fabric.rails}")
        chosen = [n for n in nics if n.rail == rail]
    elif ranks.startswith("hosts:"):
        hosts = [h for h in ranks[6:].split(",") if h]
        twice = sorted({h for h in hosts if hosts.count(h) > 1})
        if twice:
            raise RankSpecError(f"{', '.join(twice)} listed twice: a ring has one rank per NIC")
        unknown = [h for h in hosts if h not in {n.host for n in nics}]
        if unknown:
            raise RankSpecError(f"unknown host(s) {', '.join(unknown)}; hosts are {nics[0].host} ...")
        chosen = [n for n in nics if n.host in hosts]
    else:
        raise RankSpecError(f"ranks {ranks!r}: use all, rail:N, hosts:H1,H2 or a list of host:nic")
    if len(chosen) < 2:
        raise RankSpecError(f"ranks {ranks!r} selects {len(chosen)} NIC; a collective needs 2 or more")
    return chosen


def ring_order(nics: list[Nic], order: str) -> list[Nic]:
    if order == "naive":
        # Interleave groups the way a scheduler handing out nodes round-robin does:
        # consecutive ranks land under different leaves, so every ring hop crosses spines.
        by_leaf: dict[str, list[Nic]] = {}
        for nic in nics:
            by_leaf.setdefault(nic.leaf, []).append(nic)
        columns = list(by_leaf.values())
        return [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]
    if order == "topo":
        return sorted(nics, key=lambda n: (n.rail, n.leaf, n.host))
    raise RankSpecError(f"ring order {order!r}: use {' or '.join(ORDERS)}")


def ring_hops_through_spines(nics: list[Nic]) -> int:
    """Ring hops (rank i -> i+1) between hosts whose two NICs sit under different leaves
    (a hop between NICs of one host never enters the fabric)."""
    return sum(a.leaf != b.leaf and a.host != b.host for a, b in zip(nics, nics[1:] + nics[:1]))


def _int(text: str, whole: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RankSpecError(f"{whole}: expected a number after ':'") from None
