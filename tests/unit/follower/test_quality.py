"""The quality pass's scoring: top-k hits against the labels, and each share's 95% Wilson interval."""

from __future__ import annotations

import numpy as np

from common.stats import wilson_interval
from follower.point.quality import hits_at, share


def test_hits_at_counts_the_true_class_among_the_k_highest_scores() -> None:
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], np.float32)
    truth = np.array([1, 1, 0, 1])
    assert hits_at(scores, truth, 1) == 1  # only row 0 ranks its class first
    assert hits_at(scores, truth, 2) == 2  # row 1's class is second
    assert hits_at(scores, truth, 3) == 4 == hits_at(scores, truth, 10)  # k past the classes: every row


def test_a_tie_ranks_the_lower_class_first() -> None:
    scores = np.array([[0.5, 0.5, 0.0]], np.float32)
    assert hits_at(scores, np.array([0]), 1) == 1 and hits_at(scores, np.array([1]), 1) == 0


def test_a_share_carries_its_count_and_wilson_interval() -> None:
    measured = share(531, 540)
    assert (measured.hits, measured.samples, measured.value) == (531, 540, 531 / 540)
    assert (measured.low, measured.high) == wilson_interval(531, 540)
    assert measured.low < measured.value < measured.high < 1.0
    assert measured.points() == f"98.3% [{100 * measured.low:.1f}, {100 * measured.high:.1f}]"
    every = share(50, 50)
    assert every.value == 1.0 and every.high == 1.0 and every.low < 1.0  # all right is still an estimate
