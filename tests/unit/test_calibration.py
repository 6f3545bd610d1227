"""Calibration buckets (results/calibration.py): each verdict lands in the bucket of its confidence,
and a bucket's share right is counted from its own verdicts only."""

from twin.results.calibration import table


def test_verdicts_land_in_the_bucket_of_their_confidence_and_are_counted_there():
    buckets = {b.label: b for b in table([(0.3, False), (0.97, True), (0.97, False), (0.999, True),
                                          (1.0, True), (None, False)])}
    assert (buckets["[0, 0.5)"].verdicts, buckets["[0, 0.5)"].share_right) == (1, 0.0)
    assert (buckets["[0.95, 0.99)"].verdicts, buckets["[0.95, 0.99)"].share_right) == (2, 0.5)
    assert buckets["[0.99, 1)"].verdicts == 1 and buckets["[0.99, 1)"].mean_confidence == 0.999
    assert (buckets["1.0"].verdicts, buckets["1.0"].right) == (2, 1)  # no confidence given: a claim of 1.0
    assert sum(b.verdicts for b in buckets.values()) == 6
