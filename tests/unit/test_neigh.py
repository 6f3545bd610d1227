"""The machine-wide ARP table limits: each lab adds its entries, the last one down restores the
machine's own values exactly, whatever order labs come and go in, and a second release is a no-op."""

from twin.lab import neigh
from twin.lab.files import open_lab


def limits(folder):
    return [int((folder / name).read_text()) for name in neigh.LIMITS]


def test_labs_add_their_entries_and_the_last_restores_the_machine(run_dir, neigh_limits):
    neigh.reserve("a", 1000)
    assert limits(neigh_limits) == [1128, 1512, 2024]
    neigh.reserve("b", 300)
    assert limits(neigh_limits) == [1428, 1812, 2324]
    neigh.reserve("b", 300)  # the same lab again: not counted twice
    assert limits(neigh_limits) == [1428, 1812, 2324]
    neigh.release("a")
    assert limits(neigh_limits) == [428, 812, 1324] and neigh.reserved() == {"b": 300}
    neigh.release("b")
    assert limits(neigh_limits) == [128, 512, 1024]
    assert not (run_dir / neigh.BOOK).exists()
    neigh.release("b")  # idempotent, as `twin lab down` is
    assert limits(neigh_limits) == [128, 512, 1024]


def test_the_machines_values_are_read_when_the_first_lab_comes(run_dir, neigh_limits):
    (neigh_limits / "gc_thresh3").write_text("4096\n")  # an operator's own setting
    neigh.reserve("a", 10)
    neigh.release("a")
    assert limits(neigh_limits) == [128, 512, 4096]


def test_a_lab_needs_two_entries_per_link():
    _lab, fabric = open_lab("pod64")
    assert neigh.entries_needed(fabric) == 2 * 640 + 120  # beyond the default 1024: the pod64 cliff
