"""Buffers of one rank for one collective, filled so that every element's correct result is known.

Values are small integers in float32 (exact), varying by position, so a lost, shifted or
duplicated chunk shows up as wrong elements, as in nccl-tests' #wrong column.
"""

from __future__ import annotations

from twin.collectives.metrics import ELEMENT_BYTES

PATTERN_PERIOD = 251


class _Channel:
    def __init__(self, op: str, elements: int, rank: int, world: int):
        import torch

        self.op = op
        n, r = world, rank
        chunk = elements // n
        base_full = torch.arange(elements, dtype=torch.float32).remainder_(PATTERN_PERIOD).add_(1)
        base = base_full[:chunk]
        if op == "allreduce":
            self.template = base_full * (r + 1)
            self.output = self.template.clone()
            self.expected = base_full * (n * (n + 1) / 2)
        elif op == "broadcast":
            self.template = base_full.clone() if r == 0 else torch.zeros(elements)
            self.output = self.template.clone()
            self.expected = base_full.clone()
        elif op == "allgather":
            self.input = base * (r + 1)
            self.output = torch.zeros(chunk * n)
            self.expected = torch.cat([base * (j + 1) for j in range(n)])
        elif op == "reducescatter":
            self.input = torch.cat([base * (r + 1) + j for j in range(n)])
            self.output = torch.zeros(chunk)
            self.expected = base * (n * (n + 1) / 2) + n * r
        elif op == "alltoall":
            self.input = torch.cat([base * (r * n + j + 1) for j in range(n)])
            self.output = torch.zeros(chunk * n)
            self.expected = torch.cat([base * (j * n + r + 1) for j in range(n)])
        else:
            raise ValueError(f"unknown collective {op!r}")

    def fill(self) -> None:
        if self.op in ("allreduce", "broadcast"):
            self.output.copy_(self.template)  # in place: the result overwrites the input
        else:
            self.output.zero_()

    def launch(self, dist, group):
        if self.op == "allreduce":
            return dist.all_reduce(self.output, group=group, async_op=True)
        if self.op == "broadcast":
            return dist.broadcast(self.output, src=0, group=group, async_op=True)
        if self.op == "allgather":
            return dist.all_gather_single(self.output, self.input, group=group, async_op=True)
        if self.op == "reducescatter":
            return dist.reduce_scatter_single(self.output, self.input, group=group, async_op=True)
        return dist.all_to_all_single(self.output, self.input, group=group, async_op=True)

    def wrong(self) -> int:
        return int((self.output != self.expected).sum().item())


class Buffers:
    """`size` bytes with nccl-tests' meaning, split evenly over `channels` independent collectives."""

    def __init__(self, op: str, size: int, rank: int, world: int, channels: int = 1):
        per_channel = size // ELEMENT_BYTES // channels // world * world
        if per_channel < world:
            raise ValueError(f"size {size} B is too small for {world} ranks x {channels} channels")
        self.channels = [_Channel(op, per_channel, rank, world) for _ in range(channels)]

    def fill(self) -> None:
        for channel in self.channels:
            channel.fill()

    def launch(self, dist, channel: int, group):
        return self.channels[channel].launch(dist, group)

    def wrong(self) -> int:
        return sum(channel.wrong() for channel in self.channels)
