"""Is a detector's confidence a probability? Its verdicts over many runs, bucketed by the confidence
it gave them, against the share of each bucket that was right (issue 33: a verdict at 0.98 should be
right 98 % of the time). Read from results folders, graded as the runs graded them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from twin.results import record as results_record
from twin.results.analysis import analyse
from twin.results.grading import graded_verdicts

BUCKETS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0)  # lower bounds; the last bucket is exactly 1.0


@dataclass
class Bucket:
    low: float
    high: float  # exclusive, except the last (1.0)
    verdicts: int = 0
    right: int = 0
    confidence_sum: float = 0.0

    @property
    def label(self) -> str:
        return "1.0" if self.low == self.high else f"[{self.low:g}, {self.high:g})"

    @property
    def share_right(self) -> float | None:
        return round(self.right / self.verdicts, 3) if self.verdicts else None

    @property
    def mean_confidence(self) -> float | None:
        return round(self.confidence_sum / self.verdicts, 3) if self.verdicts else None


def outcomes(folder: Path) -> list[tuple[str, float | None, bool]]:
    """(detector, confidence, right) for every verdict a results folder holds."""
    run = results_record.load(folder)
    report = analyse(run)
    return [(v.detector, v.confidence, right)
            for v, right in graded_verdicts(run.records, report.faults, run.targets, run.record.duration_s)]


def table(graded: list[tuple[float | None, bool]]) -> list[Bucket]:
    """One detector's (confidence, right) pairs in BUCKETS (a verdict without a confidence counts
    as 1.0: it claimed certainty)."""
    buckets = [Bucket(low, high) for low, high in zip(BUCKETS, BUCKETS[1:], strict=False)] + [Bucket(1.0, 1.0)]
    for confidence, right in graded:
        value = 1.0 if confidence is None else confidence
        bucket = buckets[-1] if value >= 1.0 else next(b for b in buckets if b.low <= value < b.high)
        bucket.verdicts += 1
        bucket.right += right
        bucket.confidence_sum += value
    return buckets
