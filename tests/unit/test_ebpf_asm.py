"""The eBPF encoder: instructions as the kernel reads them, labels resolved to offsets. (The
programs themselves are loaded and run by the kernel in the integration tests.)"""

import pytest

from twin.lab.ebpf import asm
from twin.lab.ebpf.asm import R0, R1, R2, R6, R8, R10, Label
from twin.lab.pfc import programs


def test_encodings_match_the_instruction_set():
    assert asm.mov(R6, R1).encode() == bytes([0xBF, 0x16, 0, 0, 0, 0, 0, 0])  # r6 = r1
    assert asm.mov(R0, imm=-1).encode() == bytes([0xB7, 0x00, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF])
    assert asm.load(R2, R8, 20, 4).encode() == bytes([0x61, 0x82, 20, 0, 0, 0, 0, 0])  # r2 = *(u32 *)(r8 + 20)
    assert asm.store(R10, -8, R1, 8).encode() == bytes([0x7B, 0x1A, 0xF8, 0xFF, 0, 0, 0, 0])
    assert asm.fetch_add(R8, 0, R1).encode() == bytes([0xDB, 0x18, 0, 0, 1, 0, 0, 0])  # atomic fetch-add
    assert asm.cmpxchg(R8, 8, R1, 8).encode() == bytes([0xDB, 0x18, 8, 0, 0xF1, 0, 0, 0])
    assert asm.call(130).encode() == bytes([0x85, 0, 0, 0, 130, 0, 0, 0])
    assert asm.exit_().encode() == bytes([0x95, 0, 0, 0, 0, 0, 0, 0])
    wide = asm.load_map(R1, 7)
    assert [i.encode() for i in wide] == [bytes([0x18, 0x11, 0, 0, 7, 0, 0, 0]), bytes(8)]


def test_jumps_count_slots_after_the_jump_and_a_map_load_takes_two():
    code = asm.assemble([asm.jump("==", R0, "out"), *asm.load_map(R1, 3), asm.mov(R0, imm=1),
                         Label("out"), asm.exit_()])
    assert len(code) == 5 * 8
    assert code[2:4] == (3).to_bytes(2, "little")  # over the two-slot load and the mov


def test_labels_must_exist_once():
    with pytest.raises(ValueError, match="undefined label"):
        asm.assemble([asm.goto("nowhere")])
    with pytest.raises(ValueError, match="defined twice"):
        asm.assemble([Label("a"), Label("a"), asm.exit_()])


def test_the_queue_programs_assemble_and_end_in_exit():
    for code in (programs.enqueue(3, 9, 10, 11, 12), programs.dequeue(3, 9, 10, 12)):
        assert len(code) % 8 == 0 and code[-8:] == asm.exit_().encode()
        assert len(code) // 8 < 100  # small enough to read, and to verify in microseconds


def test_a_port_key_is_the_word_the_programs_build():
    """ifindex | node << 32, as a little-endian 64-bit key (programs._find_queue)."""
    assert programs.port_key(3, 7) == ((3 << 32) | 7).to_bytes(8, "little")
