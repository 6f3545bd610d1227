"""The collectives over point-to-point messages, as NCCL's ring and direct algorithms run them;
torch does every reduction (tensor ops on views of the buffers).

`link` is what moves bytes (a ProcessGroup: rank(), size()): post_send(peer, view) and
post_recv(peer, view) return requests, wait(requests) blocks until they are done (or raises).
Ranks form a ring in group-rank order.
"""

from __future__ import annotations

from typing import Protocol

import torch

PIECE_BYTES = 1 << 20  # a broadcast is pipelined down the chain in pieces of this size


class Link(Protocol):
    def rank(self) -> int: ...

    def size(self) -> int: ...

    def post_send(self, peer: int, view: memoryview) -> list: ...

    def post_recv(self, peer: int, view: memoryview) -> list: ...

    def wait(self, requests: list, what: str) -> None: ...


def as_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's storage as bytes (no copy)."""
    return memoryview(tensor.detach().reshape(-1).numpy()).cast("B")


def chunks(flat: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """`parts` contiguous views, as even as can be (the first ones one element longer)."""
    base, extra = divmod(flat.numel(), parts)
    out, start = [], 0
    for index in range(parts):
        length = base + (1 if index < extra else 0)
        out.append(flat[start:start + length])
        start += length
    return out


def reduce_into(target: torch.Tensor, other: torch.Tensor, op: str) -> None:
    if op == "sum":
        target.add_(other)
    elif op == "max":
        torch.maximum(target, other, out=target)
    elif op == "min":
        torch.minimum(target, other, out=target)
    elif op == "product":
        target.mul_(other)
    else:
        raise ValueError(f"the roce backend has no reduction {op!r}")


def exchange(link: Link, send: torch.Tensor, recv: torch.Tensor) -> None:
    """Send to the next rank and receive from the previous one at once: one ring step."""
    size = link.size()
    requests = link.post_recv((link.rank() - 1) % size, as_bytes(recv))
    requests += link.post_send((link.rank() + 1) % size, as_bytes(send))
    link.wait(requests, "recv")


def reduce_scatter_ring(link: Link, parts: list[torch.Tensor], op: str, owner_shift: int) -> None:
    """Ring reduce-scatter in place: after n-1 steps rank r holds the full reduction of
    parts[(r + owner_shift) % n]."""
    n, r = link.size(), link.rank()
    scratch = torch.empty(max(p.numel() for p in parts), dtype=parts[0].dtype)
    for step in range(n - 1):
        send_index = (r - step + owner_shift - 1) % n
        recv_index = (r - step + owner_shift - 2) % n
        incoming = scratch[:parts[recv_index].numel()]
        exchange(link, parts[send_index], incoming)
        reduce_into(parts[recv_index], incoming, op)


def allgather_ring(link: Link, parts: list[torch.Tensor], owned_shift: int) -> None:
    """Ring allgather in place: rank r starts with parts[(r + owned_shift) % n]."""
    n, r = link.size(), link.rank()
    for step in range(n - 1):
        exchange(link, parts[(r - step + owned_shift) % n], parts[(r - step + owned_shift - 1) % n])


def allreduce(link: Link, tensor: torch.Tensor, op: str) -> None:
    if link.size() == 1:
        return
    parts = chunks(tensor.reshape(-1), link.size())
    reduce_scatter_ring(link, parts, op, owner_shift=1)  # rank r ends with part r+1 reduced
    allgather_ring(link, parts, owned_shift=1)


def reduce_scatter(link: Link, output: torch.Tensor, input_: torch.Tensor, op: str) -> None:
    work = input_.reshape(-1).clone()
    parts = chunks(work, link.size())
    if link.size() > 1:
        reduce_scatter_ring(link, parts, op, owner_shift=0)  # rank r ends with part r reduced
    output.reshape(-1).copy_(parts[link.rank()])


def allgather(link: Link, output: torch.Tensor, input_: torch.Tensor) -> None:
    parts = chunks(output.reshape(-1), link.size())
    parts[link.rank()].copy_(input_.reshape(-1))
    allgather_ring(link, parts, owned_shift=0)


def alltoall(link: Link, output: torch.Tensor, input_: torch.Tensor) -> None:
    """Direct: every rank sends its j-th part to rank j, at once."""
    n, r = link.size(), link.rank()
    outs, ins = chunks(output.reshape(-1), n), chunks(input_.reshape(-1), n)
    outs[r].copy_(ins[r])
    requests = []
    for peer in range(n):
        if peer != r:
            requests += link.post_recv(peer, as_bytes(outs[peer]))
    for shift in range(1, n):  # staggered, so no rank is everyone's first target
        peer = (r + shift) % n
        requests += link.post_send(peer, as_bytes(ins[peer]))
    link.wait(requests, "alltoall")


def broadcast(link: Link, tensor: torch.Tensor, root: int) -> None:
    """Down the ring from the root, pipelined: each rank forwards a piece as soon as it has it."""
    n, r = link.size(), link.rank()
    if n == 1:
        return
    position = (r - root) % n
    flat = tensor.reshape(-1)
    pieces = chunks(flat, max(1, -(-flat.numel() * flat.element_size() // PIECE_BYTES)))
    forwarded = []
    for piece in pieces:
        if position > 0:
            link.wait(link.post_recv((r - 1) % n, as_bytes(piece)), "recv")
        if position < n - 1:
            forwarded += link.post_send((r + 1) % n, as_bytes(piece))
    link.wait(forwarded, "send")
