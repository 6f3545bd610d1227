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


def _btf_structs() -> dict[str, dict]:
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(layout.OBJECT), "-j"], capture_output=True,
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
