"""The collectives' algorithms (roce/algorithms.py) on an in-memory link between threads: every
element checked against torch's own maths."""

import queue
import threading

import pytest
import torch

from twin.roce import algorithms


class _Recv:
    def __init__(self, box, view):
        self.box, self.view = box, view


class FakeLink:
    def __init__(self, rank, size, boxes):
        self._rank, self._size, self.boxes = rank, size, boxes

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def post_send(self, peer, view):
        self.boxes[(self._rank, peer)].put(bytes(view))
        return []

    def post_recv(self, peer, view):
        return [_Recv(self.boxes[(peer, self._rank)], view)]

    def wait(self, requests, what):
        for request in requests:
            data = request.box.get(timeout=5)
            assert len(data) == len(request.view), (len(data), len(request.view))
            request.view[:] = data


def run(size, body):
    boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
    results, errors = [None] * size, []

    def rank(r):
        try:
            results[r] = body(FakeLink(r, size, boxes))
        except Exception as exc:  # surfaced below
            errors.append(exc)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


def data(rank, n):
    return torch.arange(n, dtype=torch.float32).remainder(251) * (rank + 1)


@pytest.mark.parametrize("size,n", [(2, 10), (3, 10), (4, 1001), (5, 3)])
def test_allreduce_sums_and_maxes(size, n):
    sums = run(size, lambda link: _allreduce(link, n, "sum"))
    maxes = run(size, lambda link: _allreduce(link, n, "max"))
    assert all(torch.equal(s, sum(data(r, n) for r in range(size))) for s in sums)
    assert all(torch.equal(m, data(size - 1, n)) for m in maxes)


def _allreduce(link, n, op):
    tensor = data(link.rank(), n)
    algorithms.allreduce(link, tensor, op)
    return tensor


@pytest.mark.parametrize("size", [2, 3, 4])
def test_reduce_scatter_allgather_alltoall_broadcast(size):
    n = 4 * size

    def body(link):
        r = link.rank()
        rs_out = torch.zeros(n // size)
        algorithms.reduce_scatter(link, rs_out, data(r, n), "sum")
        ag_out = torch.zeros(n)
        algorithms.allgather(link, ag_out, data(r, n // size))
        a2a_out = torch.zeros(n)
        algorithms.alltoall(link, a2a_out, torch.arange(n, dtype=torch.float32) + 100 * r)
        bc = data(r, n) if r == 1 else torch.zeros(n)
        algorithms.broadcast(link, bc, root=1)
        return rs_out, ag_out, a2a_out, bc

    total = sum(data(r, n) for r in range(size))
    part = n // size
    for r, (rs_out, ag_out, a2a_out, bc) in enumerate(run(size, body)):
        assert torch.equal(rs_out, total[r * part:(r + 1) * part])
        assert torch.equal(ag_out, torch.cat([data(j, part) for j in range(size)]))
        assert torch.equal(a2a_out, torch.cat([torch.arange(r * part, (r + 1) * part, dtype=torch.float32) + 100 * j
                                               for j in range(size)]))
        assert torch.equal(bc, data(1, n))


def test_chunks_are_contiguous_views_covering_the_tensor():
    flat = torch.arange(10.0)
    parts = algorithms.chunks(flat, 3)
    assert [p.numel() for p in parts] == [4, 3, 3]
    parts[1].fill_(-1)
    assert flat[4:7].tolist() == [-1, -1, -1]
