"""A bring-up's phases are named data (lab/deploy.PHASES), in the order their dependencies need."""

from test_model import fabric_of

from twin.lab.deploy import PHASES


def test_phases_are_named_once_and_ordered_by_what_each_needs():
    names = [phase.name for phase in PHASES]
    assert len(names) == len(set(names))
    before = [("cpu-awake", "addresses+shaping"),  # the shapers' timers fire on time from the first
              ("namespaces", "links"), ("links", "addresses+shaping"),
              ("pfc", "phy"),  # the queue programs replace the ports' clsact qdiscs, phy adds to them
              ("addresses+shaping", "frr-start"), ("frr-start", "bgp-release"), ("bgp-release", "bgp-ecmp"),
              ("bgp-ecmp", "bfd"), ("bfd", "reachability")]
    assert all(names.index(a) < names.index(b) for a, b in before)


def test_a_lab_runs_the_optional_phases_it_asks_for():
    fabric = fabric_of("mini")
    wanted = {phase.name for phase in PHASES if phase.wanted(fabric)}
    assert ("pfc" in wanted) == fabric.queue_programs and ("lldp" in wanted) == fabric.lldp
    assert {"cpu-awake", "namespaces", "frr-start", "reachability"} <= wanted
