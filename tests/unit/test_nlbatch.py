"""Netlink requests encoded once (nlbatch.py): split per message, sentinels patched."""

import struct

import pytest

from twin.lab.kernel import nlbatch, shaping

RTM_NEWQDISC, RTM_NEWTCLASS, RTM_NEWTFILTER = 36, 40, 44


def test_shaping_is_nine_requests_for_interface_zero():
    messages = shaping.requests(100_000_000, 200_000)
    kinds = [nlbatch.HEADER.unpack_from(m)[1] for m in messages]
    assert kinds == [RTM_NEWQDISC, RTM_NEWTCLASS, RTM_NEWTCLASS, RTM_NEWQDISC, RTM_NEWTCLASS] + [RTM_NEWTFILTER] * 4
    assert all(nlbatch.HEADER.unpack_from(m)[0] == len(m) for m in messages)
    assert all(nlbatch.INDEX.unpack_from(m, nlbatch.INDEX_OFFSET)[0] == 0 for m in messages)
    # the queue limit is in the TBF request, so each limit has its own requests
    assert shaping.requests(100_000_000, 300_000)[3] != messages[3]


def test_a_program_fd_is_written_where_its_sentinel_was():
    (message,) = nlbatch.bpf_filter(nlbatch.CLSACT_EGRESS, "ftw_enq")
    patched = nlbatch.patch(message, nlbatch.FD_SENTINEL, 7)
    assert len(patched) == len(message) and struct.pack("=I", nlbatch.FD_SENTINEL) not in patched
    assert sum(a != b for a, b in zip(message, patched)) <= 4
    with pytest.raises(ValueError, match="found 0 times"):
        nlbatch.patch(patched, nlbatch.FD_SENTINEL, 8)
