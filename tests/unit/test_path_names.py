"""Naming a discovered path's links (probes/mesh.py PathNames): answered hops by their ingress
address, unanswered ones from the model where their neighbours pin them."""

from test_model import fabric_of

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.probes.mesh import PathNames
from twin.probes.trace import unless_silent
from twin.spec.labfile import load_lab


def ingress(fabric, a: str, b: str) -> str:
    """The address with which switch `b` answers a TTL probe that came in from `a`."""
    link = next(each for each in fabric.links_of(b) if each.peer(b).node == a)
    return str(link.endpoint(b).address.ip)


def offenders(fabric, switches: list[str]) -> list[str]:
    return [ingress(fabric, a, b) for a, b in zip(switches, switches[1:])]


# rail4: host-g1-h1:nic1 -> host-g2-h1:nic2 crosses planes: leaf, spine, superspine, spine, leaf
HOPS = ["leaf-g1-r1", "spine-r1-s1", "superspine-1", "spine-r2-s2", "leaf-g2-r2"]
SRC, DST = "host-g1-h1:nic1", "host-g2-h1:nic2"


def expected(fabric) -> tuple:
    names = PathNames(fabric)
    inner = [names.between[frozenset(pair)] for pair in zip(HOPS, HOPS[1:])]
    return (names.host_link[SRC], *inner, names.host_link[DST])


def test_a_fully_answered_path_names_every_link():
    fabric = fabric_of("rail4")
    assert PathNames(fabric).path(SRC, offenders(fabric, HOPS), DST) == expected(fabric)


def test_a_silent_hop_is_named_from_its_neighbours():
    fabric = fabric_of("rail4")
    names, full = PathNames(fabric), offenders(fabric, HOPS)
    for silent in range(len(full)):  # any one hop, the last (the destination's leaf) included
        answered = [None if i == silent else a for i, a in enumerate(full)]
        assert names.path(SRC, answered, DST) == expected(fabric), silent


def test_two_silent_hops_in_a_row_stay_unknown():
    fabric = fabric_of("rail4")
    answered = offenders(fabric, HOPS)
    answered[0] = answered[1] = None  # spine and superspine: ECMP could have taken others
    path = PathNames(fabric).path(SRC, answered, DST)
    assert path[1] is None and path[2] is None
    assert path[3:] == expected(fabric)[3:]


def test_a_flow_whose_discovery_a_fault_silences_keeps_its_path():
    """Rediscovered while a fault drops its 5-tuple, the flow answers up to the faulty link only;
    agreeing so far with its last complete path, it is still on that path. A hop that answers
    from elsewhere is a new path."""
    fabric = fabric_of("rail4")
    names, full = PathNames(fabric), offenders(fabric, HOPS)
    known = names.path(SRC, full, DST)
    silenced = names.path(SRC, [full[0], None, None, None], DST)
    assert None in silenced and unless_silent(known, silenced) == known
    moved = list(silenced)
    moved[1] = "spine-r1-s2 -- superspine-1"
    assert unless_silent(known, tuple(moved)) == tuple(moved)
    assert unless_silent(None, silenced) == silenced
    # routes changed since the path was complete: the flow may be elsewhere, silenced there
    assert unless_silent(known, silenced, stale=True) == silenced


def test_a_flow_a_switch_has_no_route_for_after_a_route_change_keeps_its_path():
    """Routes withdrawn with nowhere else to go (the one superspine died): the first switch has no
    route and answers the TTL probes so (ICMP unreachable). The flow's last complete path is where
    its loss belongs; the unanswered one names only the host links. A silent path after a route
    change may be a flow that moved (the test above)."""
    fabric = fabric_of("rail4")
    names, full = PathNames(fabric), offenders(fabric, HOPS)
    known = names.path(SRC, full, DST)
    unanswered = names.path(SRC, [None] * len(full), DST)
    assert unless_silent(known, unanswered, stale=True, unroutable=True) == known
    assert unless_silent(known, unanswered, stale=True) == unanswered


LONE_SWITCHES = """\
name: lone
fabric: {tiers: 3, groups: 2, rails: 2, hosts_per_group: 1, spines_per_plane: SPINES, superspines: 1}
links: {rate: 100mbit, mtu: 1500}
"""


def lone_fabric(tmp_path, spines: int):
    lab = tmp_path / "lone.yaml"
    lab.write_text(LONE_SWITCHES.replace("SPINES", str(spines)))
    return build_fabric(load_lab(lab, runtime.names()))


def test_a_hop_every_shortest_path_takes_through_one_switch_is_that_switch(tmp_path):
    """The only spine of each plane and the only superspine: a flow no switch answers for (they
    died, or their routes did) still crosses them, and its loss is theirs, not the host links'."""
    fabric = lone_fabric(tmp_path, spines=1)
    hops = ["leaf-g1-r1", "spine-r1-s1", "superspine-1", "spine-r2-s1", "leaf-g2-r2"]
    names = PathNames(fabric)
    path = names.path(SRC, [None] * (len(hops) - 1), DST)
    assert None not in path
    assert path[1:-1] == tuple(names.between[frozenset(pair)] for pair in zip(hops, hops[1:]))


def test_a_silent_hop_with_two_switches_to_choose_from_stays_unknown(tmp_path):
    """Two spines a plane: the superspine is pinned, the spines (and so every link) are not."""
    fabric = lone_fabric(tmp_path, spines=2)
    path = PathNames(fabric).path(SRC, [None] * 4, DST)
    assert path[1:-1] == (None, None, None, None)
