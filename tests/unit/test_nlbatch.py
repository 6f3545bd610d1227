"""Netlink requests encoded once (nlbatch.py): split per message, sentinels patched."""

import struct

import pytest

from twin.lab.kernel import nlbatch, shaping

RTM_NEWQDISC, RTM_NEWTCLASS, RTM_NEWTFILTER = 36, 40, 44


def test_shaping_a_switch_port_is_seven_requests_and_a_nic_eleven_for_interface_zero():
    messages = shaping.requests(100_000_000, 200_000, 9000)
    kinds = [nlbatch.HEADER.unpack_from(m)[1] for m in messages]
    assert kinds == [RTM_NEWQDISC, RTM_NEWTCLASS, RTM_NEWQDISC] + [RTM_NEWTFILTER] * 4
    nic = [nlbatch.HEADER.unpack_from(m)[1] for m in shaping.requests(100_000_000, 200_000, 9000, nic=True)]
    assert nic == [RTM_NEWQDISC, RTM_NEWTCLASS, RTM_NEWTCLASS, RTM_NEWQDISC, RTM_NEWTCLASS] + [RTM_NEWTFILTER] * 6
    assert all(nlbatch.HEADER.unpack_from(m)[0] == len(m) for m in messages)
    assert all(nlbatch.INDEX.unpack_from(m, nlbatch.INDEX_OFFSET)[0] == 0 for m in messages)
    # the queue limit is in the TBF request, so each limit has its own requests
    assert shaping.requests(100_000_000, 300_000, 9000)[2] != messages[2]


def test_a_program_fd_is_written_where_its_sentinel_was():
    (message,) = nlbatch.bpf_filter(nlbatch.CLSACT_EGRESS, "ftw_enq")
    patched = nlbatch.patch(message, nlbatch.FD_SENTINEL, 7)
    assert len(patched) == len(message) and struct.pack("=I", nlbatch.FD_SENTINEL) not in patched
    assert sum(a != b for a, b in zip(message, patched)) <= 4
    with pytest.raises(ValueError, match="found 0 times"):
        nlbatch.patch(patched, nlbatch.FD_SENTINEL, 8)


def _attributes(message: bytes) -> dict[int, bytes]:
    """A tc request's attributes after its tcmsg, by type."""
    found, offset = {}, nlbatch.INDEX_OFFSET + 16
    while offset < nlbatch.HEADER.unpack_from(message)[0]:
        length, kind = struct.unpack_from("=HH", message, offset)
        found[kind] = message[offset + 4:offset + length]
        offset += (length + 3) & ~3
    return found


def test_a_ports_clsact_names_the_nodes_shared_blocks_and_the_loopbacks_does_not():
    """Each block a qdisc binds alone costs every later bind a step of a kernel-wide search: the
    ports share their node's two blocks (nlbatch.SHARED_BLOCKS)."""
    (shared,) = nlbatch.clsact()
    assert nlbatch.HEADER.unpack_from(shared)[0] == len(shared)
    attributes = _attributes(shared)
    assert attributes[1] == b"clsact\0"  # TCA_KIND, intact
    kinds = (nlbatch.TCA_INGRESS_BLOCK, nlbatch.TCA_EGRESS_BLOCK)
    blocks = {kind: struct.unpack("=I", attributes[kind])[0] for kind in kinds}
    assert blocks == {nlbatch.TCA_INGRESS_BLOCK: nlbatch.SHARED_BLOCKS[nlbatch.CLSACT_INGRESS],
                      nlbatch.TCA_EGRESS_BLOCK: nlbatch.SHARED_BLOCKS[nlbatch.CLSACT_EGRESS]}
    (own,) = nlbatch.clsact(shared=False)
    assert not {nlbatch.TCA_INGRESS_BLOCK, nlbatch.TCA_EGRESS_BLOCK} & set(_attributes(own))
    (removal,) = nlbatch.clsact("del")
    assert nlbatch.TCA_INGRESS_BLOCK not in _attributes(removal)


def test_a_shared_filter_names_its_hooks_block_where_a_ports_names_the_hook():
    parent = struct.Struct("=I")
    parent_offset = nlbatch.INDEX_OFFSET + 8  # tcmsg: index, handle, parent
    for hook in (nlbatch.CLSACT_INGRESS, nlbatch.CLSACT_EGRESS):
        (shared,) = nlbatch.bpf_filter(hook, "phy", 0xE000)
        (own,) = nlbatch.bpf_filter(hook, "phy", 0xE000, shared=False)
        assert parent.unpack_from(shared, parent_offset)[0] == nlbatch.SHARED_BLOCKS[hook]
        assert parent.unpack_from(own, parent_offset)[0] == int(hook.replace(":", ""), 16)
