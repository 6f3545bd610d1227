"""eBPF instructions (Documentation/bpf/standardization/instruction-set.rst), encoded as the kernel
reads them: 8 bytes each, `code`, `dst:4|src:4`, a signed 16-bit offset, a signed 32-bit immediate.

Programs are lists of `Insn` and `Label`; `assemble` resolves jumps to labels.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Registers: R0 return value, R1-R5 arguments (clobbered by calls), R6-R9 callee-saved, R10 frame.
R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 = range(11)

# Instruction classes, sizes, modes.
LD, LDX, ST, STX, ALU, JMP, JMP32, ALU64 = range(8)
W, H, B, DW = 0x00, 0x08, 0x10, 0x18
IMM, MEM, ATOMIC = 0x00, 0x60, 0xC0
K, X = 0x00, 0x08
SIZES = {4: W, 2: H, 1: B, 8: DW}

ALU_OPS = {"+": 0x00, "-": 0x10, "*": 0x20, "|": 0x40, "&": 0x50, "<<": 0x60, ">>": 0x70,
           "neg": 0x80, "^": 0xA0, "=": 0xB0}
# Conditions of jumps; "s" marks signed comparisons.
JMP_OPS = {"==": 0x10, ">": 0x20, ">=": 0x30, "&": 0x40, "!=": 0x50, "s>": 0x60, "s>=": 0x70,
           "<": 0xA0, "<=": 0xB0, "s<": 0xC0, "s<=": 0xD0}
JA, CALL, EXIT = 0x00, 0x80, 0x90

# Atomic operations (in imm): add, and the compare-and-exchange on R0.
ATOMIC_ADD, FETCH, CMPXCHG = 0x00, 0x01, 0xF0 | 0x01
PSEUDO_MAP_FD = 1  # src of a 64-bit load: imm is a map's file descriptor


@dataclass(frozen=True)
class Insn:
    code: int
    dst: int = 0
    src: int = 0
    off: int | str = 0  # a Label name until assembled (jumps)
    imm: int = 0

    def encode(self, off: int | None = None) -> bytes:
        offset = self.off if off is None else off
        return struct.pack("<BBhi", self.code, (self.src << 4) | self.dst, offset, self.imm)


@dataclass(frozen=True)
class Label:
    name: str


def mov(dst: int, src: int | None = None, imm: int = 0) -> Insn:
    """dst = src (register) or dst = imm (64-bit, sign-extended)."""
    return alu("=", dst, src, imm)


def alu(op: str, dst: int, src: int | None = None, imm: int = 0) -> Insn:
    """dst = dst <op> src|imm, 64-bit."""
    return Insn(ALU64 | ALU_OPS[op] | (X if src is not None else K), dst, src or 0, 0, imm)


def load(dst: int, base: int, off: int, size: int) -> Insn:
    """dst = *(u<size*8> *)(base + off)"""
    return Insn(LDX | MEM | SIZES[size], dst, base, off)


def store(base: int, off: int, src: int, size: int) -> Insn:
    """*(u<size*8> *)(base + off) = src"""
    return Insn(STX | MEM | SIZES[size], base, src, off)


def store_imm(base: int, off: int, imm: int, size: int) -> Insn:
    return Insn(ST | MEM | SIZES[size], base, 0, off, imm)


def fetch_add(base: int, off: int, src: int, size: int = 8) -> Insn:
    """Atomically *(base + off) += src; src receives the old value."""
    return Insn(STX | ATOMIC | SIZES[size], base, src, off, ATOMIC_ADD | FETCH)


def cmpxchg(base: int, off: int, src: int, size: int = 4) -> Insn:
    """Atomically: if *(base + off) == R0, store src there; R0 receives the old value."""
    return Insn(STX | ATOMIC | SIZES[size], base, src, off, CMPXCHG)


def jump(op: str, dst: int, target: str, src: int | None = None, imm: int = 0) -> Insn:
    """if dst <op> src|imm goto target (64-bit compare)."""
    return Insn(JMP | JMP_OPS[op] | (X if src is not None else K), dst, src or 0, target, imm)


def goto(target: str) -> Insn:
    return Insn(JMP | JA, off=target)


def call(helper: int) -> Insn:
    return Insn(JMP | CALL, imm=helper)


def exit_() -> Insn:
    return Insn(JMP | EXIT)


def load_map(dst: int, map_fd: int) -> list[Insn]:
    """dst = the map (a two-slot 64-bit immediate load the kernel rewrites to the map's address)."""
    return [Insn(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, map_fd), Insn(0)]


def assemble(program: list[Insn | Label | list]) -> bytes:
    """Flatten, resolve labels to relative offsets (counted in 8-byte slots after the jump)."""
    flat: list[Insn | Label] = []
    for item in program:
        flat.extend(item if isinstance(item, list) else [item])
    labels, slot = {}, 0
    for item in flat:
        if isinstance(item, Label):
            if item.name in labels:
                raise ValueError(f"label {item.name} defined twice")
            labels[item.name] = slot
        else:
            slot += 1
    out, slot = bytearray(), 0
    for item in flat:
        if isinstance(item, Label):
            continue
        if isinstance(item.off, str):
            if item.off not in labels:
                raise ValueError(f"jump to undefined label {item.off}")
            out += item.encode(labels[item.off] - slot - 1)
        else:
            out += item.encode()
        slot += 1
    return bytes(out)
