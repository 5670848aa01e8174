"""A job's quality checks (`quality:`): how good the served model's answers are, measured on the same follower and
server as its speed, after each point's load (outside the measured time), and stored on the point."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from common.base import StrictModel

# The fields of an uploaded request-data set that hold each sample's true class (npz `labels`, JSONL `label`):
# never a model input.
LABEL_FIELDS = ("labels", "label")
# And the fields that hold each sample's true values (npz `targets`, JSONL `target`), for quality.regression.
TARGET_FIELDS = ("targets", "target")
TRUTH_FIELDS = LABEL_FIELDS + TARGET_FIELDS
MAX_QUALITY_SAMPLES = 10_000
MAX_TOP_K = 100
MAX_ANSWER_TOKENS = 4096
# max_samples unset: a tensor model's samples are cheap (one batch a request); a language model's are greedy completions
DEFAULT_SAMPLES = {"tensor": 1000, "llm": 64}
# How an evaluation set's completion is scored against its row's answer (follower/point/llmquality.py: scorers).
Scorer = Literal["exact", "choice", "contains", "number"]


class AccuracySpec(StrictModel):
    """Top-1 and top-k accuracy of the served model's class scores against the labels of the job's uploaded request
    data (`data: {source: upload}`: an npz with a `labels` array, or JSONL rows with a `label`), the data run through
    the job's own client-side processors as under load."""

    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 5
    """Also report top-k accuracy: the true class among the k highest scores (1: top-1 only)."""


class EvaluationSpec(StrictModel):
    """A language model's evaluation set: the job's prompt set (llm.dataset) with an `answer` on every row, each prompt
    completed greedily (temperature 0, at most `answer_tokens` tokens) through the served API and scored against its
    answer; the share scored correct is the point's accuracy."""

    scorer: Scorer = "exact"
    """exact: the completion equals the answer (both lower-cased, whitespace collapsed, surrounding punctuation and
    quotes stripped); choice: the letter A-J the completion names is the answer's (the one after "answer is" or
    "Answer:", else the first in parentheses, else the first standalone one, as in "B." or "B because"); contains:
    the normalised answer appears in the normalised completion; number: the completion's last number (thousands
    commas dropped) equals the answer's number (to a relative 1e-6)."""


class QualitySpec(StrictModel):
    """How good the answers are, checked on every point after its load, each figure with its sample count and a 95%
    confidence interval. A tensor model: accuracy against labels, agreement of its scores. A language model: an
    evaluation set, and greedy agreement of its completions."""

    accuracy: AccuracySpec | None = AccuracySpec()
    """A tensor model: accuracy against the request data's labels; null for none (a language model has none)."""
    regression: bool = False
    """A tensor model: the served answer's values against the request data's true values (an npz `targets` array, or a
    `target` on each JSONL row): mean absolute error with its 95% interval, root mean square error and the largest
    error; with it, accuracy is off unless asked."""
    evaluation: EvaluationSpec | None = None
    """A language model: the accuracy of its greedy completions of an evaluation set (llm.dataset rows with answers)."""
    agreement: bool = False
    """Also compare each point's answers with the answers of the job's first configuration (its first backend and
    server options: list `precision: float32` (or `llm.dtype: float32`) first in a sweep to make the unquantised
    model the reference) to the same samples. A tensor model at the same batch size: the share of samples whose top
    class agrees, and the largest and mean absolute difference of the scores. A language model, greedy completions of
    the same prompts (the evaluation set's, the prompt set's, or prompts built as the load's are, first ones in order):
    the share identical token for token, the share of the reference's tokens matched at their position, and the mean
    position of the first differing token. The reference must run on the same follower (not a split job's other part)."""
    max_samples: Annotated[int, Field(ge=1, le=MAX_QUALITY_SAMPLES)] | None = None
    """Score at most this many samples (the data's first ones, in order) per point; unset: 1,000 for a tensor model, 64
    completions for a language model."""
    min_accuracy: Annotated[float, Field(ge=0, le=1)] | None = None
    """The job's quality floor (0..1): a point whose top-1 accuracy (a language model's evaluation score) is below it,
    or could not be scored, is marked below the floor and never ranks as best: not the leaderboard's best under SLO,
    not a recommendation. Its latency figures stand as measured."""
    answer_tokens: Annotated[int, Field(ge=1, le=MAX_ANSWER_TOKENS)] = 32
    """A language model: the longest completion asked for (greedy, temperature 0; it may stop sooner at its end)."""

    def samples(self, kind: Literal["tensor", "llm"]) -> int:
        """The samples scored per point: `max_samples`, else the default for the model's kind."""
        return self.max_samples or DEFAULT_SAMPLES[kind]

    def for_job(self, *, language: bool, uploaded: bool, prompt_set: bool) -> QualitySpec:
        """These checks as the job can run them (a language model's without the tensor accuracy it did not ask for), or
        a ValueError naming the field: `uploaded` whether the job's request data is an upload, `prompt_set` whether a
        language model's requests come from one."""
        if language:
            if self.accuracy is not None and "accuracy" in self.model_fields_set:
                raise ValueError(
                    "quality.accuracy scores a tensor model's class scores; a language model has none to score "
                    "(quality.evaluation scores its completions)"
                )
            if self.evaluation is not None and not prompt_set:
                raise ValueError("quality.evaluation scores an evaluation set: give llm.dataset (a prompt set with answers)")
            if self.regression:
                raise ValueError("quality.regression scores a tensor model's values; a language model's is quality.evaluation")
            if self.evaluation is None and not self.agreement:
                raise ValueError("quality for a language model is quality.evaluation or quality.agreement: ask for one")
            if self.min_accuracy is not None and self.evaluation is None:
                raise ValueError("quality.min_accuracy holds an evaluation score to a floor: ask for quality.evaluation")
            return self.model_copy(update={"accuracy": None})
        if self.evaluation is not None:
            raise ValueError("quality.evaluation scores a language model's completions; a tensor model's is quality.accuracy")
        checks = self
        if self.regression and "accuracy" not in self.model_fields_set:
            checks = self.model_copy(update={"accuracy": None})
        if (checks.accuracy is not None or checks.regression) and not uploaded:
            what = (
                "quality.accuracy scores against labelled data"
                if checks.accuracy
                else "quality.regression scores against true values"
            )
            raise ValueError(f"{what}: give data: {{source: upload, id: ...}}")
        if checks.min_accuracy is not None and checks.accuracy is None:
            raise ValueError("quality.min_accuracy holds top-1 accuracy to a floor: keep quality.accuracy")
        if checks.agreement and checks.accuracy is None and not checks.regression:
            raise ValueError("quality.agreement compares the answers the accuracy pass collects: keep quality.accuracy")
        return checks
