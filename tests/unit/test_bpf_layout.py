"""The queue programs (twin/lab/ebpf): the compiled object's structures are what layout.py reads
(from the object's BTF, as bpftool dumps it), and the object loads; a program the verifier refuses
is refused with the verifier's reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from twin.lab.ebpf import layout
from twin.lab.ebpf.libbpf import BpfError, BpfObject

built = pytest.mark.skipif(not layout.OBJECT.is_file(), reason="the BPF object is built by `make deps`")


def _btf_structs(path=layout.OBJECT) -> dict[str, dict]:
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(path), "-j"], capture_output=True,
                          text=True, check=True)
    return {t["name"]: t for t in json.loads(dump.stdout)["types"] if t.get("kind") == "STRUCT" and t.get("name")}


@built
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is installed by `make deps`")
def test_the_python_layout_is_the_objects():
    structs = _btf_structs()
    queue = structs["queue"]
    assert queue["size"] == layout.QUEUE.size
    assert [m["name"] for m in queue["members"]] == list(layout.QUEUE_FIELDS)
    assert {m["name"]: m["bits_offset"] // 8 for m in queue["members"]} == layout.OFFSET
    key = structs["port_key"]
    assert key["size"] == layout.PORT_KEY.size
    assert [m["bits_offset"] // 8 for m in key["members"]] == [0, 8, 12]
    assert layout.EVENT.size == 32  # pinned by a _Static_assert in queues.h
    assert structs["balance"]["size"] == layout.BALANCE.size
    assert [m["name"] for m in structs["balance"]["members"]] == ["mode", "choices", "flowlet_gap_ns", "hash_offset",
                                                                  "spare"]
    group = structs["ecmp_group"]
    assert group["size"] == layout.ECMP_GROUP.size
    assert [m["bits_offset"] // 8 for m in group["members"]] == [0, 4, 8, 8 + 4 * layout.MAX_MEMBERS]


def test_a_changed_layout_would_be_caught():
    """The comparison above reads offsets from the struct format: a field added in the middle moves
    every offset after it."""
    shifted = {name: offset + (4 if offset >= layout.OFFSET["kmin"] else 0) for name, offset in layout.OFFSET.items()}
    assert shifted != layout.OFFSET


@built
@pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")
def test_the_object_loads_with_its_maps_sized():
    obj = BpfObject(layout.OBJECT, max_entries={"queues": 3, "enqueue_ports": 3, "dequeue_ports": 3})
    try:
        assert obj.program_fd("enqueue") > 0 and obj.program_fd("dequeue") > 0
        assert obj.max_entries("queues") == 3 and obj.max_entries("events") == 1 << 20
    finally:
        obj.close()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("clang") is None, reason="needs root and clang")
def test_a_refused_program_names_the_verifiers_reason(tmp_path):
    source = tmp_path / "bad.bpf.c"
    source.write_text('#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n'
                      'SEC("tc") int enqueue(struct __sk_buff *skb) { return *(int *)(long)skb->data; }\n'
                      'char LICENSE[] SEC("license") = "GPL";\n')
    target = tmp_path / "bad.bpf.o"
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{_multiarch()}", "-c", str(source),
                    "-o", str(target)], check=True)
    with pytest.raises(BpfError) as caught:
        BpfObject(target)
    assert "bad.bpf.o" in caught.value.message
    assert "invalid" in (caught.value.hint or "") or "R" in (caught.value.hint or ""), caught.value.hint


def _multiarch() -> str:
    return subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()


def test_the_constants_the_programs_share_are_the_same_everywhere():
    """The DSCP a multipath NIC writes (roce/wire.py) is the one the switches balance, and the
    group members layout.py packs are the header's."""
    import re

    from twin.model import pathhash
    from twin.roce.wire import REORDERABLE_DSCP

    header = (layout.OBJECT.parent / "queues.h").read_text()
    defines = dict(re.findall(r"^#define (\w+) (\d+)", header, re.MULTILINE))
    assert int(defines["REORDERABLE_DSCP"]) == layout.REORDERABLE_DSCP == REORDERABLE_DSCP
    assert int(defines["MAX_MEMBERS"]) == layout.MAX_MEMBERS
    assert int(defines["OFFSET_BITS"]) == pathhash.OFFSET_BITS


@built
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="bpftool is installed by `make deps`")
def test_the_physical_layers_python_layout_is_the_objects():
    from twin.lab.ports import phy
    structs = _btf_structs(phy.OBJECT)
    assert structs["phy_fault"]["size"] == phy.FAULT.size
    assert [m["name"] for m in structs["phy_fault"]["members"]] == list(phy.FAULT_FIELDS)
    assert structs["phy_counts"]["size"] == phy.COUNTS.size
    assert [m["name"] for m in structs["phy_counts"]["members"]] == list(phy.COUNT_FIELDS)
    assert structs["blackhole_key"]["size"] == phy.BLACKHOLE_KEY.size
    assert [m["bits_offset"] // 8 for m in structs["blackhole_key"]["members"]] == [0, 4, 12]
    assert structs["phy_settings"]["size"] == phy.SETTINGS.size


@built
@pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")
def test_the_physical_layer_passes_a_healthy_port_and_drops_and_counts_as_its_fault_says():
    import struct

    from twin.lab.ebpf.frames import ipv4_udp, loopback_phy
    from twin.lab.ebpf.libbpf import lookup, run_on_packet, update
    from twin.lab.ports import phy

    unspec, shot = 0xFFFFFFFF, 2
    zero = struct.pack("<I", 0)

    def fault(**fields):  # the port's element, and the lab's count of faulty ports as phy.py keeps it
        update(obj.map_fd("phy_faults"), zero, phy.FAULT.pack(*(phy.HEALTHY | fields).values()))
        settings(faulty=int(bool(fields.get("drop") or fields.get("corrupt"))))

    def settings(holes=0, faulty=0, crossed=0):
        update(obj.map_fd("phy_settings"), zero, phy.SETTINGS.pack(holes, faulty, crossed, 0))

    def counts():
        return dict(zip(phy.COUNT_FIELDS, phy.COUNTS.unpack(lookup(obj.map_fd("phy_counts"), zero, phy.COUNTS.size)),
                        strict=True))

    with loopback_phy(phy.OBJECT) as obj:
        receive = obj.program_fd("receive")
        assert run_on_packet(receive, ipv4_udp(0), 100)[0] == unspec  # healthy: passed on
        update(obj.map_fd("phy_faults"), zero, phy.FAULT.pack(*(phy.HEALTHY | {"drop": phy.ONE,
                                                                               "drop_flows": phy.ONE}).values()))
        assert run_on_packet(receive, ipv4_udp(0), 100)[0] == unspec  # the lab counts no faulty port: not read
        fault(drop=phy.ONE, drop_flows=phy.ONE)
        assert run_on_packet(receive, ipv4_udp(0), 100)[0] == shot
        assert counts() == {"crc_errors": 0, "dropped": 100}  # a silent drop counts nothing a port shows
        fault(drop=phy.ONE, drop_flows=0)  # a flow subset that holds no flow
        assert run_on_packet(receive, ipv4_udp(0), 10)[0] == unspec
        fault(corrupt=phy.ONE, corrupt_min=2000)  # only packets of 2000 bytes and more: this one is 86
        assert run_on_packet(receive, ipv4_udp(0), 10)[0] == unspec
        fault(corrupt=phy.ONE)
        assert run_on_packet(receive, ipv4_udp(0), 10)[0] == shot
        assert counts()["crc_errors"] == 10
        fault()
        import socket
        from ipaddress import IPv4Network
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            cookie = phy.layout.netns_cookie(sock)
        update(obj.map_fd("phy_blackholes"), phy._hole_key(cookie, IPv4Network("10.0.0.2/31")), struct.pack("<Q", 0))
        assert run_on_packet(receive, ipv4_udp(0), 10)[0] == unspec  # no black hole counted in the settings yet
        settings(holes=1)
        assert run_on_packet(receive, ipv4_udp(0), 10)[0] == shot  # toward 10.0.0.2: into the hole
        update(obj.map_fd("phy_blackholes"), phy._hole_key(cookie, IPv4Network("10.0.0.2/31")), struct.pack("<Q", 0))
        settings()
        fault(attenuation=900)  # an optic reading only: the program passes everything
        assert run_on_packet(receive, ipv4_udp(0), 10)[0] == unspec
        assert run_on_packet(obj.program_fd("transmit"), ipv4_udp(0), 10)[0] == unspec  # no swapped cable
