"""nccl-tests conventions, checked against figures worked out by hand."""

import pytest

from twin.collectives.metrics import Measurement, aligned_size, bus_factor, human_size, size_sweep
from twin.collectives.worker import hang_cause

MiB = 1024 * 1024


@pytest.mark.parametrize("op, ranks, factor", [
    ("allreduce", 2, 1.0), ("allreduce", 4, 1.5), ("allreduce", 16, 1.875),
    ("allgather", 4, 0.75), ("reducescatter", 8, 0.875), ("alltoall", 2, 0.5),
    ("broadcast", 16, 1.0), ("allreduce", 1, 0.0),
])
def test_bus_factor(op, ranks, factor):
    assert bus_factor(op, ranks) == pytest.approx(factor)


def test_bus_factor_rejects_unknown_ops_and_empty_groups():
    with pytest.raises(ValueError, match="valid: allreduce"):
        bus_factor("reduce_all", 4)
    with pytest.raises(ValueError):
        bus_factor("allreduce", 0)


def test_busbw_by_hand():
    # 8 MiB allreduce over 4 ranks in 0.5 s: algbw = 16 MiB/s, busbw = 16 MiB/s * 2*3/4 = 24 MiB/s,
    # which on a 200 Mbit/s link (25e6 B/s) is 24*1048576/25e6 = 1.0066 of line rate.
    m = Measurement("allreduce", 8 * MiB, 4, 0.5, 0)
    assert m.count == 2 * MiB
    assert m.algbw == 16 * MiB
    assert m.busbw == 24 * MiB
    assert m.line_fraction(200_000_000) == pytest.approx(24 * MiB * 8 / 200e6)
    # allgather: 'bytes' is the total over ranks; 4 MiB over 8 ranks in 1 s -> busbw 3.5 MiB/s
    assert Measurement("allgather", 4 * MiB, 8, 1.0, 0).busbw == pytest.approx(3.5 * MiB)


def test_size_sweep_doubles_like_nccl_tests():
    assert size_sweep("1MiB:8MiB") == [MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    assert size_sweep("1MiB:12MiB") == [MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    assert size_sweep("64KiB") == [64 * 1024]
    for bad in ("8MiB:1MiB", "0:1MiB", "big"):
        with pytest.raises(ValueError):
            size_sweep(bad)


def test_aligned_size_splits_evenly():
    assert aligned_size(MiB, 3) % (4 * 3) == 0
    assert aligned_size(MiB, 3) <= MiB
    assert aligned_size(5, 4) == 16  # never below one element per rank
    assert human_size(8 * MiB) == "8MiB"
    assert human_size(1000) == "1000B"


@pytest.mark.parametrize("error, cause", [
    ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms "
     "for recv operation to complete", "timeout"),
    ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
     "[10.1.0.5]:3259. This is typically caused by a remote worker crashing.", "peer_closed"),
    ("[enforce fail at ../torch/csrc/distributed/c10d/ProcessGroupGloo.cpp] bad address", "error"),
])
def test_a_hang_is_told_apart_by_gloos_first_line(error, cause):
    """Messages as gloo printed them in a train-stall run."""
    assert hang_cause(error) == cause
