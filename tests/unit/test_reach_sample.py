"""The reachability sample of a lab's convergence check (model/nics.py, sample_pairs): small labs keep all
pairs; big ones send from every NIC to a fixed number of others spread over rails and leaves."""

from collections import Counter

import pytest

from twin.lab.files import open_lab
from twin.model.nics import SAMPLE_PER_NIC, checked_pairs, fabric_nics, fabric_pairs, sample_pairs


@pytest.mark.parametrize("lab", ["mini", "rail4", "rail8"])
def test_small_labs_check_every_pair(lab):
    nics = fabric_nics(open_lab(lab)[1])
    assert sample_pairs(nics) == fabric_pairs(nics)


@pytest.mark.parametrize("lab", ["pod64", "pod128"])
def test_big_labs_check_a_spread_sample(lab):
    fabric = open_lab(lab)[1]
    nics = fabric_nics(fabric)
    pairs = sample_pairs(nics)
    assert len(pairs) == len(nics) * SAMPLE_PER_NIC < len(fabric_pairs(nics))
    assert all(nics[s].host != nics[d].host for s, d in pairs)
    sent, answered = Counter(s for s, _ in pairs), Counter(d for _, d in pairs)
    assert set(sent) == set(answered) == set(range(len(nics)))
    assert max(answered.values()) <= 2 * SAMPLE_PER_NIC
    rails = {n.rail for n in nics}
    for s in range(len(nics)):  # each NIC's destinations span rails and many leaves
        mine = [nics[d] for src, d in pairs if src == s]
        assert len({n.rail for n in mine}) >= len(rails) // 2
        assert len({n.leaf for n in mine}) >= SAMPLE_PER_NIC // 2
    # every leaf sends to and hears from every rail
    assert {(nics[s].leaf, nics[d].rail) for s, d in pairs} == {(n.leaf, m.rail) for n in nics for m in nics}
    assert checked_pairs(nics, all_pairs=True) == fabric_pairs(nics)
