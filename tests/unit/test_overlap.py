"""Faults that cannot be active at once (twin/faults/overlap.py): the per-target sweep finds exactly
the clashes that comparing every pair finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_model import fabric_of  # a shipped lab, built

from twin.faults.overlap import Span, clash_with_active, clashes
from twin.model.fabric import link_key

MINI = fabric_of("mini")
PLACES = sorted(link_key(link.name) for link in MINI.links) + sorted(n.name for n in MINI.switches)


def _near(a: str, b: str) -> bool:
    """One pair by the rule: the same link or node, or a node and one of its links."""
    if a == b:
        return True
    node, link = (a, b) if a in MINI.nodes else (b, a)
    return node in MINI.nodes and link not in MINI.nodes and node in link.split(" -- ")


def _brute(spans: list[Span]) -> set[str]:
    clashing = set()
    for later in spans:
        for earlier in spans:
            if earlier is later or (earlier.start_s, earlier.id) > (later.start_s, later.id):
                continue
            if earlier.end_s > later.start_s and any(_near(a, b) for a in later.targets for b in earlier.targets):
                clashing.add(later.id)
    return clashing


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PLACES), st.integers(0, 20), st.integers(1, 8)), max_size=12))
def test_the_sweep_finds_what_every_pair_finds(entries):
    spans = [Span(f"f{i}", float(at), float(at + length), (place,)) for i, (place, at, length) in enumerate(entries)]
    assert {later.id for later, _earlier, _place in clashes(MINI, spans)} == _brute(spans)


def test_a_switch_and_its_link_clash_two_switches_do_not():
    link = link_key("leaf-g1-r1 -- spine-1")
    assert clash_with_active(MINI, ("spine-1",), (link,)) == {link}
    assert clash_with_active(MINI, ("spine-1",), ("leaf-g1-r1",)) == set()  # both near their link: no clash
    assert clash_with_active(MINI, (link,), (link,)) == {link}


def test_three_thousand_faults_on_one_link_are_checked_once_each():
    spans = [Span(f"f{i}", i / 1000, i / 1000 + 5, ("leaf-g1-r1 -- spine-1",)) for i in range(3000)]
    found = clashes(MINI, spans)
    assert len(found) == 2999 and len({later.id for later, _e, _p in found}) == 2999
