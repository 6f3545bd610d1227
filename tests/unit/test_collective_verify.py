"""The expected values the ranks check against, exercised by real gloo collectives on loopback
(no lab needed): every op, an odd rank count, several channels; and damage is counted."""

import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from twin.collectives.metrics import OPS  # noqa: E402, F401
from twin.collectives.verify import Buffers  # noqa: E402, F401

WORLD = 3


def _rank(rank: int, store_path: str, results) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, WORLD), rank=rank, world_size=WORLD)
    groups = [None, dist.new_group(list(range(WORLD)))]
    for op in OPS:
        for channels in (1, 2):
            buffers = Buffers(op, 3 * 4 * 1000 * channels, rank, WORLD, channels)
            for _round in range(2):  # refilled every iteration, as the benchmark does
                buffers.fill()
                for work in [buffers.launch(dist, c, groups[c]) for c in range(channels)]:
                    work.wait()
                results.put((rank, op, channels, buffers.wrong()))
    dist.destroy_process_group()


def test_every_op_verifies_clean_over_real_gloo(tmp_path):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.start_processes(_rank, args=(str(tmp_path / "store"), results), nprocs=WORLD, start_method="spawn")
    seen = [results.get(timeout=5) for _ in range(WORLD * len(OPS) * 2 * 2)]
    assert {(op, channels) for _r, op, channels, _w in seen} == {(op, c) for op in OPS for c in (1, 2)}
    assert [s for s in seen if s[3] != 0] == []


@pytest.mark.parametrize("op", OPS)
def test_damage_is_counted(op):
    buffers = Buffers(op, 4 * 4 * 64, rank=1, world=4)
    channel = buffers.channels[0]
    channel.output.copy_(channel.expected)  # as if the collective had run correctly
    assert buffers.wrong() == 0
    channel.output[3] += 1
    channel.output[-1] = 0
    assert buffers.wrong() == 2


def test_too_small_sizes_are_refused():
    with pytest.raises(ValueError, match="too small"):
        Buffers("allreduce", 8, rank=0, world=4)
