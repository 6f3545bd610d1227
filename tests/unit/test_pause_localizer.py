"""Naming a PFC storm's source from pause counters (detect/pauses.py), on synthetic counters."""

from twin.detect.pauses import STORM_S, PauseLocalizer
from twin.lab.files import open_lab
from twin.lab.pfc.published import PortCounters


def counters(**held):
    """'node ifname' -> counters; values: (seconds held now, queue above XOFF)."""
    return {tuple(key.split(" ")): PortCounters(paused=seconds > 0, paused_for_s=seconds, xoff=xoff)
            for key, (seconds, xoff) in held.items()}


def test_a_host_holding_its_leaf_port_is_named_and_the_spread_is_not():
    _lab, fabric = open_lab("mini")
    localizer = PauseLocalizer(fabric)
    ports = counters(**{"leaf-g1-r1 hs-g1h1": (STORM_S + 0.5, True),  # held by the host: the source
                        "spine-1 lf-g1r1": (STORM_S + 0.2, True),  # held by leaf-g1-r1, whose queue is full
                        "host-g1-h2 nic1": (STORM_S + 0.2, False)})
    verdicts = localizer.observe(10.0, ports)
    assert [(v.node, v.link, v.kind) for v in verdicts] == [("host-g1-h1", None, "pfc_storm")]
    assert localizer.observe(10.5, ports) == []  # named once


def test_a_switch_holding_a_port_with_no_full_queue_names_the_link():
    _lab, fabric = open_lab("mini")
    verdicts = PauseLocalizer(fabric).observe(5.0, counters(**{"spine-1 lf-g1r1": (STORM_S, False)}))
    assert [(v.link, v.kind) for v in verdicts] == [("spine-1 -- leaf-g1-r1", "pfc_pause")]


def test_short_pauses_are_congestion_not_evidence():
    _lab, fabric = open_lab("mini")
    held = {"leaf-g1-r1 hs-g1h1": (STORM_S / 2, False), "spine-1 lf-g1r1": (0.004, True)}
    assert PauseLocalizer(fabric).observe(3.0, counters(**held)) == []
