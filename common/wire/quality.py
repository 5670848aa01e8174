"""A point's quality figures as they travel and are stored: each a share with its sample count and 95% interval."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Share(BaseModel):
    """A proportion measured on `samples` samples: `hits` of them, and its 95% Wilson score interval."""

    model_config = ConfigDict(extra="forbid")

    hits: int
    samples: int
    value: float
    low: float
    high: float

    def points(self) -> str:
        """As a user reads it: percent, with its interval, e.g. "98.3% [97.0, 99.1]"."""
        return f"{100 * self.value:.1f}% [{100 * self.low:.1f}, {100 * self.high:.1f}]"


class Accuracy(BaseModel):
    """Top-1 (and top-k) accuracy of the served model's class scores against the data set's labels; for a language
    model, the share of an evaluation set's greedy completions its `scorer` scores correct (as `top1`, k 1)."""

    model_config = ConfigDict(extra="forbid")

    top1: Share
    k: int  # the k of `topk` (1: top-1 only)
    topk: Share | None = None
    scorer: str | None = None  # a language model's evaluation scorer (common.spec.quality.Scorer); None: class scores

    def name(self) -> str:
        """What the figure is, as a user reads it."""
        return f"evaluation ({self.scorer})" if self.scorer else "top-1 accuracy"


class Agreement(BaseModel):
    """The point's answers against the reference configuration's answers to the same samples at the same batch size."""

    model_config = ConfigDict(extra="forbid")

    reference: str  # the reference configuration as a user reads it ("onnxruntime (default options)", "... threads=2")
    top1: Share  # samples whose highest-scored class is the reference's
    max_abs_diff: float  # of the scores, over every sample and class
    mean_abs_diff: float


class CompletionAgreement(BaseModel):
    """A language model's greedy completions against the reference configuration's to the same prompts, compared as
    token ids (the model's own tokenizer on each completion's text)."""

    model_config = ConfigDict(extra="forbid")

    reference: str
    exact: Share  # completions identical, token for token, to the reference's
    tokens: Share | None  # the reference's tokens matched by the same token at the same position
    first_difference: float | None  # mean position (0: the first token) of the first differing token; None: none
    # differ (a completion that is the other's beginning differs at the shorter's end)
    differing: int  # completions that differ
    tokens_from: str = "server"  # server: the tokens each answer's logprobs named; tokenizer: its text split again


class TargetError(BaseModel):
    """The served answer's values against the data's true values (`quality.regression`): each sample's error is the
    mean of its values' absolute errors; the figures are over the samples."""

    model_config = ConfigDict(extra="forbid")

    samples: int
    values: int  # true values per sample
    mae: float  # mean absolute error
    mae_low: float | None  # its 95% interval (Student's t over the samples' errors; None for one sample)
    mae_high: float | None
    rmse: float  # root mean square error over every value
    max_abs: float  # the largest absolute error of any value

    def shown(self) -> str:
        """As a user reads it: "MAE 0.012 [0.010, 0.014], RMSE 0.02"."""
        interval = f" [{self.mae_low:.3g}, {self.mae_high:.3g}]" if self.mae_low is not None and self.mae_high is not None else ""
        return f"MAE {self.mae:.3g}{interval}, RMSE {self.rmse:.3g}"


class Quality(BaseModel):
    """What the point's quality checks found (follower/point/quality.py), and each check that could not run, with why."""

    model_config = ConfigDict(extra="forbid")

    accuracy: Accuracy | None = None
    agreement: Agreement | None = None
    error: TargetError | None = None  # quality.regression
    completions: CompletionAgreement | None = None  # a language model's agreement
    from_point: int | None = None  # a language model's figures from this earlier point of the same server and options
    # The job's quality floor (quality.min_accuracy) and whether the point's accuracy met it (a point that could not be
    # scored does not); None without a floor. A point below it never ranks as best.
    floor: float | None = None
    floor_met: bool | None = None

    def held_to(self, floor: float | None) -> Quality:
        """These figures with the job's floor applied."""
        if floor is None:
            return self
        met = self.accuracy is not None and self.accuracy.top1.value >= floor
        return self.model_copy(update={"floor": floor, "floor_met": met})

    not_run: list[str] = []  # "accuracy: why it could not run"
    seconds: float = 0.0  # the pass's wall time, after the load
