"""Rank selection and ring order on the shipped labs' models."""

import pytest
from test_model import fabric_of

from twin.collectives.groups import RankSpecError, ring_hops_through_spines, ring_order, select_nics


def test_selections_on_rail4():
    fabric = fabric_of("rail4")
    assert len(select_nics(fabric, "all")) == 16
    rail2 = select_nics(fabric, "rail:2")
    assert len(rail2) == 4 and {n.rail for n in rail2} == {2} and len({n.host for n in rail2}) == 4
    two_hosts = select_nics(fabric, "hosts:host-g1-h1,host-g2-h2")
    assert len(two_hosts) == 8 and {n.host for n in two_hosts} == {"host-g1-h1", "host-g2-h2"}
    assert [n.label for n in select_nics(fabric, ["host-g1-h1:nic3", "host-g2-h1:nic1"])] == \
        ["host-g1-h1:nic3", "host-g2-h1:nic1"]


@pytest.mark.parametrize("spec, message", [
    ("rail:5", "rails 1..4"), ("rail:x", "a number"), ("hosts:host-g9-h1", "unknown host"),
    (["host-g1-h1:nic9"], "unknown host NIC"), ("every", "use all, rail:N"),
    (["host-g1-h1:nic1"], "needs 2 or more"),
])
def test_bad_selections_say_why(spec, message):
    with pytest.raises(RankSpecError, match=message):
        select_nics(fabric_of("rail4"), spec)


def test_topology_aware_ring_crosses_spines_less():
    fabric = fabric_of("rail4")
    rail = select_nics(fabric, "rail:1")
    naive, topo = ring_order(rail, "naive"), ring_order(rail, "topo")
    assert sorted(n.label for n in naive) == sorted(n.label for n in topo)
    # 4 NICs under 2 leaves: interleaved, every hop changes leaf; grouped, only 2 of 4 do
    assert ring_hops_through_spines(naive) == 4
    assert ring_hops_through_spines(topo) == 2
    with pytest.raises(RankSpecError):
        ring_order(rail, "random")


def test_hops_inside_a_host_do_not_count_as_crossing_spines():
    fabric = fabric_of("rail4")
    naive = ring_order(select_nics(fabric, "all"), "naive")
    # host-major: 4 NICs of one host in a row, so only the 4 host-to-host hops leave a host
    assert [n.host for n in naive[:4]] == ["host-g1-h1"] * 4
    assert ring_hops_through_spines(naive) == 4
    assert ring_hops_through_spines(ring_order(select_nics(fabric, "all"), "topo")) == 8


def test_a_size_the_machine_cannot_hold_is_refused(monkeypatch):
    from test_model import fabric_of

    from twin.workloads import collective
    from twin.workloads.collective import CollectiveParams, SizeError, check_ranks
    monkeypatch.setattr(collective, "physical_memory", lambda: 8 << 30)
    mini = fabric_of("mini")  # 4 ranks: 3 copies of 1 GiB each need 12 GiB, over half of 8
    with pytest.raises(SizeError,
                       match=r"needs about 12.0 GiB \(3 copies a rank\), over half of this machine's 8.0 GiB"):
        check_ranks(CollectiveParams(size="1GiB"), mini)
    check_ranks(CollectiveParams(size="256MiB"), mini)  # 3 GiB: fits
