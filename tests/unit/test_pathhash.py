"""Deterministic path control on paper (model/pathhash.py): offsets one apart take paths that
share no spine or superspine, on every pair of host NICs of the shipped multi-tier labs; the
hash is the data plane's (the integration test test_balance.py checks it against real packets)."""

from ipaddress import IPv4Address
from pathlib import Path

import pytest

from twin.lab import runtime
from twin.model import pathhash
from twin.model.build import build_fabric
from twin.model.ports import peer
from twin.spec.labfile import load_lab

LABS = Path(__file__).resolve().parents[2] / "labs"


def fabric_of(name):
    return build_fabric(load_lab(LABS / f"{name}.yaml", runtime.names()))


@pytest.mark.parametrize("name", ["mini", "rail4", "rail8"])
def test_offsets_one_apart_share_no_spine_or_superspine(name):
    fabric = fabric_of(name)
    paths = pathhash.Paths(fabric)
    nics = [end.address.ip for _host, end in fabric.host_nics()]
    crossing = 0
    for src in nics:
        for dst in nics:
            if src == dst:
                continue
            for offset in range(4):
                here = paths.path(src, dst, 17, pathhash.with_offset(50000, offset), 4791)
                there = paths.path(src, dst, 17, pathhash.with_offset(50000, offset + 1), 4791)
                assert here[0].node == there[0].node and here[-1].node == there[-1].node
                if pathhash.middle(here):
                    crossing += 1
                    assert not pathhash.middle(here) & pathhash.middle(there), (src, dst, offset, here, there)
    assert crossing > 0


def test_a_path_follows_the_links_and_ends_at_the_destination():
    fabric = fabric_of("rail4")
    nics = dict((f"{host}:{end.ifname}", end.address.ip) for host, end in fabric.host_nics())
    hops = pathhash.path(fabric, nics["host-g1-h1:nic1"], nics["host-g2-h2:nic3"], 6, 40000, 80)
    assert [h.node for h in hops][0] == "host-g1-h1" and hops[-1].node == "host-g2-h2" and hops[-1].egress is None
    for hop, following in zip(hops, hops[1:]):
        assert peer(fabric, hop.egress).node == following.node


def test_the_hash_is_pinned():
    """The data plane computes the same function (lab/ebpf/balance.h): a change here must be made
    there too, and this value updated with it."""
    seed = pathhash.seed(fabric_of("mini"), "leaf-g1-r1")
    assert seed == 3332309223  # crc32(b"leaf")
    value = pathhash.flow_hash(seed, IPv4Address("10.1.0.1"), IPv4Address("10.1.0.3"), 17, 0xC123, 4791)
    assert value == 200918860
    # the offset (the source port's low byte) is not hashed: it is added after
    assert pathhash.flow_hash(seed, IPv4Address("10.1.0.1"), IPv4Address("10.1.0.3"), 17, 0xC1FF, 4791) == value
