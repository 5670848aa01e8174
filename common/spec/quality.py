"""A job's quality checks (`quality:`): how good the served model's answers are, measured on the same follower and
server as its speed, after each point's load (outside the measured time), and stored on the point."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from common.base import StrictModel

# The fields of an uploaded request-data set that hold each sample's true class (npz `labels`, JSONL `label`):
# never a model input.
LABEL_FIELDS = ("labels", "label")
MAX_QUALITY_SAMPLES = 10_000
MAX_TOP_K = 100


class AccuracySpec(StrictModel):
    """Top-1 and top-k accuracy of the served model's class scores against the labels of the job's uploaded request
    data (`data: {source: upload}`: an npz with a `labels` array, or JSONL rows with a `label`), the data run through
    the job's own client-side processors as under load."""

    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 5
    """Also report top-k accuracy: the true class among the k highest scores (1: top-1 only)."""


class QualitySpec(StrictModel):
    """How good the answers are, checked on every point after its load, each figure with its sample count and a 95%
    confidence interval."""

    accuracy: AccuracySpec | None = AccuracySpec()
    """Accuracy against the request data's labels; null for none."""
    agreement: bool = False
    """Also compare each point's answers with the answers of the job's first configuration (its first backend and
    server options: list `precision: float32` first in a sweep to make the float32 model the reference) to the same
    samples at the same batch size: the share of samples whose top class agrees, and the largest and mean absolute
    difference of the scores. The reference must run on the same follower (not a split job's other part)."""
    max_samples: Annotated[int, Field(ge=1, le=MAX_QUALITY_SAMPLES)] = 1000
    """Score at most this many samples of the data set (its first ones, in order) per point."""

    @model_validator(mode="after")
    def _agreement_reads_the_accuracy_pass(self) -> QualitySpec:
        if self.agreement and self.accuracy is None:
            raise ValueError("quality.agreement compares the answers the accuracy pass collects: keep quality.accuracy")
        return self
