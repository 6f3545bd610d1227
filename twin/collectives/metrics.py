"""nccl-tests conventions (../shared/domain.md): algbw = bytes / time, busbw = algbw x factor.

"bytes" is the buffer size on one rank for allreduce, alltoall and broadcast, and the total
size over all ranks for allgather and reducescatter; busbw is then the load each rank puts
on its link, comparable with the line rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twin.units import parse_size_bytes

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
ELEMENT_BYTES = 4  # float32, nccl-tests' default type
DTYPE = "float"


def bus_factor(op: str, ranks: int) -> float:
    if ranks < 1:
        raise ValueError("a collective needs at least one rank")
    if op == "allreduce":
        return 2 * (ranks - 1) / ranks
    if op in ("allgather", "reducescatter", "alltoall"):
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; valid: {', '.join(OPS)}")


@dataclass(frozen=True)
class Measurement:
    op: str
    size: int  # bytes, nccl-tests' meaning
    ranks: int
    time_s: float  # per iteration, slowest rank
    wrong: int
    transport: dict = field(default_factory=dict)  # roce: retransmissions, NAKs, timeouts, QP errors (all ranks)

    @property
    def count(self) -> int:
        return self.size // ELEMENT_BYTES

    @property
    def algbw(self) -> float:
        """bytes per second"""
        return self.size / self.time_s

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.op, self.ranks)

    def line_fraction(self, rate_bps: int) -> float:
        return self.busbw * 8 / rate_bps


def aligned_size(size: int, ranks: int) -> int:
    """Round down to whole float32 elements split evenly over the ranks (as nccl-tests does)."""
    unit = ELEMENT_BYTES * ranks
    return max(unit, size // unit * unit)


def size_sweep(text: str, factor: int = 2) -> list[int]:
    """'1MiB:64MiB' -> 1, 2, 4, ... 64 MiB (nccl-tests -b/-e/-f); a single size is one entry."""
    low, _, high = str(text).partition(":")
    first = parse_size_bytes(low)
    last = parse_size_bytes(high) if high else first
    if first <= 0 or last < first:
        raise ValueError(f"size range {text!r} must be low:high with 0 < low <= high, e.g. 1MiB:64MiB")
    sizes = [first]
    while sizes[-1] * factor <= last:
        sizes.append(sizes[-1] * factor)
    return sizes


def human_size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
