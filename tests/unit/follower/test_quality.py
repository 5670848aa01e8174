"""The quality pass's scoring: top-k hits against the labels, and each share's 95% Wilson interval."""

from __future__ import annotations

import math
from pathlib import Path

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


def test_a_sharded_point_is_scored_by_shard_0_alone(tmp_path: Path) -> None:
    """Every follower driving a sharded endpoint measures its share of the load, but only shard 0 (whose point is the
    one reported) scores the answers: the others leave the result as it was, sending the endpoint nothing more."""
    import asyncio
    from typing import cast

    from common.spec.job import PointSpec
    from common.spec.quality import QualitySpec
    from follower.backends import Backend
    from follower.link.leader_client import LeaderClient
    from follower.point.context import PointContext, ServerRun, ShardLink
    from follower.point.quality import with_quality
    from follower.protocols import Endpoint
    from tests.unit.follower.test_point_pipeline import MODEL
    from tests.unit.leader.test_load_label import _result

    point = PointSpec(index=0, backend="endpoint", batch_size=1, pattern="poisson", rate=10, duration_s=1, warmup_s=0, seed=0)
    shard = ShardLink(client=cast(LeaderClient, None), job_id="j", index=1, count=2, attempt=1, follower_id="f1")
    truth = np.arange(4)
    run = ServerRun(model=MODEL, model_path=tmp_path, workdir=tmp_path, quality=QualitySpec(), truth=truth, shard=shard)
    # Were the pass to run, the result would come back with a quality (here a reason: no samples were given).
    endpoint = Endpoint(protocol="kserve-http", base="http://127.0.0.1:9", model="m")
    ctx = PointContext(run=run, backend=cast(Backend, None), endpoint=endpoint, backend_version="1")
    result = _result(point)
    assert asyncio.run(with_quality(result, point, ctx)) is result


def test_a_label_outside_the_answers_classes_is_a_reason_not_a_score() -> None:
    from follower.point.quality import accuracy_of

    scores = np.zeros((2, 3), np.float32)
    assert accuracy_of(scores, np.array([0, 3]), 1) == "accuracy: a label names class 3; the answers score classes 0..2"
    # An npz of unsigned labels past int64 reads back negative: never silently scored as a miss.
    assert accuracy_of(scores, np.array([0, -5]), 1) == "accuracy: a label names class -5; the answers score classes 0..2"


def test_top_k_past_the_classes_is_reported_as_top_classes() -> None:
    from follower.point.quality import accuracy_of

    scored = accuracy_of(np.array([[0.2, 0.8], [0.9, 0.1]], np.float32), np.array([1, 1]), 5)
    assert not isinstance(scored, str) and scored.k == 2 and scored.topk is not None and scored.topk.hits == 2


def test_error_against_targets_is_each_samples_mean_absolute_error_with_a_t_interval() -> None:
    from follower.point.quality import error_of

    scores = np.array([[1.0, 2.0], [0.0, 0.0], [3.0, 3.0], [1.0, 1.0]], dtype=np.float32)
    targets = np.array([[1.0, 1.0], [0.0, 2.0], [3.0, 3.0], [2.0, 2.0], [9.0, 9.0]])  # one more than was answered
    error = error_of(scores, targets)
    assert not isinstance(error, str)
    per_sample = [0.5, 1.0, 0.0, 1.0]  # |1-1|,|2-1| -> 0.5; |0-0|,|0-2| -> 1; 0; 1
    mean, sd = sum(per_sample) / 4, float(np.std(per_sample, ddof=1))
    half = 3.182446305284263 * sd / 2  # Student's t at 97.5% with 3 degrees of freedom, over sqrt(4)
    assert (error.samples, error.values, error.mae) == (4, 2, mean)
    assert mean - half < 0 and error.mae_low == 0.0  # an absolute error is never below zero: the interval stops there
    assert error.mae_high == pytest.approx(mean + half)
    assert error.rmse == pytest.approx(math.sqrt((0 + 1 + 0 + 4 + 0 + 0 + 1 + 1) / 8)) and error.max_abs == 2.0
    assert error.shown() == "MAE 0.625 [0, 1.39], RMSE 0.935"
    one = error_of(scores[:1], targets)
    assert not isinstance(one, str) and one.mae_low is None and one.shown() == "MAE 0.5, RMSE 0.707"
    assert error_of(scores, targets[:, :1]) == "regression: the answers hold 2 values a sample, the targets 1"
