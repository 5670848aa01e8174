"""The quality pass's scoring: top-k hits against the labels, and each share's 95% Wilson interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.stats import wilson_interval
from follower.point.quality import agreement_of, hits_at, share


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


def test_agreement_counts_the_samples_whose_top_class_is_the_references_and_the_score_differences() -> None:
    reference = np.array([[0.1, 0.9], [0.8, 0.2], [0.4, 0.6]], np.float32)
    served = np.array([[0.2, 0.8], [0.4, 0.6], [0.4, 0.6]], np.float32)  # the second sample's top class changed
    agreed = agreement_of(served, reference, "onnxruntime (default options)")
    assert not isinstance(agreed, str)
    assert (agreed.top1.hits, agreed.top1.samples, agreed.reference) == (2, 3, "onnxruntime (default options)")
    assert math.isclose(agreed.max_abs_diff, 0.4, rel_tol=1e-6)
    assert math.isclose(agreed.mean_abs_diff, (0.1 + 0.1 + 0.4 + 0.4) / 6, rel_tol=1e-6)
    same = agreement_of(reference, reference, "r")
    assert not isinstance(same, str) and same.top1.value == 1.0 and same.max_abs_diff == 0.0
    assert agreement_of(served[:, :1], reference, "r") == "agreement: the answers score (1,) and the reference's (2,)"


def test_agreement_needs_accuracys_pass() -> None:
    from common.errors import InvalidSpec
    from common.spec.parse import parse_spec_yaml

    base = "name: j\nmodel: m:1\nload: {rate: 10, duration: 1s, allow_short: true}\ndata: {source: upload, id: abc}\n"
    assert parse_spec_yaml(base + "quality: {agreement: true}\n").quality.agreement  # type: ignore[union-attr]
    with pytest.raises(InvalidSpec) as caught:
        parse_spec_yaml(base + "quality: {agreement: true, accuracy: null}\n")
    assert "quality.agreement compares the answers the accuracy pass collects" in str(caught.value)
