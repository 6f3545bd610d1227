"""The joint loss model (twin/detect/tomography.py): noisy-OR rates fitted together, and the
sparsest set of links that explains the paths."""

import pytest

from twin.detect.tomography import fit, log_likelihood, select
from twin.detect.window import PooledPath


def path(links: str, sent: int, lost: int) -> PooledPath:
    return PooledPath(tuple(links.split()), sent, lost)


def test_fit_shares_a_path_lost_between_the_links_that_explain_it():
    # a alone loses 10 %, b alone 20 %; their common path loses 1 - 0.9 * 0.8 = 28 %
    paths = [path("a x", 1000, 100), path("b y", 1000, 200), path("a b", 1000, 280)]
    rates = fit(paths, ["a", "b"])
    assert rates["a"] == pytest.approx(0.10, abs=0.01) and rates["b"] == pytest.approx(0.20, abs=0.01)
    assert log_likelihood(paths, rates) > log_likelihood(paths, {"a": 0.19, "b": 0.19})


def test_a_link_on_the_paths_of_two_faults_is_not_in_the_set():
    """h lies on every lossy path (it collects both faults' loss and would win alone), but a and b
    explain their own paths that avoid h, and then all of h's: the set is {a, b}."""
    paths = [path("h a", 400, 12), path("h b", 400, 12), path("a u", 400, 6), path("b v", 400, 6),
             path("h w", 400, 0)]
    chosen = select(paths, ["h", "a", "b", "u", "v", "w"], min_gain=10.0)
    assert set(chosen.rates) == {"a", "b"} and chosen.dropped == {"h"}  # h joined first, then left
    assert chosen.score > select(paths, ["h"], min_gain=10.0).score


def test_links_kept_from_the_start_stay_and_strays_join_nothing():
    paths = [path("a x", 400, 10), path("b y", 400, 1), path("c", 400, 0)]
    assert set(select(paths, ["a", "b", "x", "y"], min_gain=10.0).rates) == {"a"}  # one stray on b: no link
    kept = select(paths, ["a", "b", "x", "y"], min_gain=10.0, keep=["c"])
    assert set(kept.rates) == {"a", "c"} and kept.rates["c"] == 0.0
    assert select(paths, [], min_gain=10.0).score == 0.0
