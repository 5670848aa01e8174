"""The processors a job may name have one home (common/spec/processors.py) that the follower implements exactly."""

from __future__ import annotations

from common.spec.job import DataRef
from common.spec.processors import POSTPROCESSORS, PREPROCESSORS, processing_problem
from follower.servers import processing

LOGITS = [("logits", "FP32", [-1, 10])]
BOXES = [("boxes", "FP32", [-1, 100, 4]), ("n", "INT64", [-1, 1])]


def test_the_follower_implements_exactly_the_names_a_job_may_give() -> None:
    assert set(processing.PREPROCESSORS) == set(PREPROCESSORS)
    assert set(processing.POSTPROCESSORS) == set(POSTPROCESSORS)


def test_unknown_names_and_outputs_topk_cannot_rank_are_problems_with_their_field() -> None:
    assert processing_problem(DataRef(postprocess="topk"), "m:1", LOGITS) is None
    assert processing_problem(DataRef(source="sample_images", preprocess="image_imagenet"), "m:1", LOGITS) is None
    assert processing_problem(DataRef(postprocess="topk"), "m:1", []) is None  # outputs unknown: not judged
    field, text = processing_problem(DataRef(postprocess="argmax"), "m:1", LOGITS) or ("", "")
    assert field == "data.postprocess" and "unknown processor 'argmax'; known: topk" in text
    field, text = processing_problem(DataRef(source="sample_images", preprocess="resize"), "m:1", LOGITS) or ("", "")
    assert field == "data.preprocess" and "known: image_imagenet, tokenize" in text
    field, text = processing_problem(DataRef(postprocess="topk"), "m:1", BOXES) or ("", "")
    assert field == "data.postprocess" and text.endswith("m:1 outputs boxes FP32[-1, 100, 4], n INT64[-1, 1]"), text
