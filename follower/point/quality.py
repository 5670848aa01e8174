"""Quality checks (`quality:`) on the point's own server, after its load: how good the answers are, beside how fast.

Accuracy sends the job's labelled request data (its first `max_samples` samples, in order, through the same
client-side processors as under load) in requests of the point's batch size, one at a time, and scores each answer's
class scores against the sample's label: top-1 and top-k, each a share with its 95% Wilson interval. The load is over,
so nothing here touches the point's latency figures; the pass's own wall time is stored beside it. Agreement sets the
same answers beside those of the job's first configuration (its reference) to the same samples at the same batch size,
kept from that configuration's own points earlier in the attempt. A check that cannot run (no labels, answers with no
class scores, a server that stopped answering, no reference answers) says why on the point instead of failing the job.
A language model's checks are follower/point/llmquality.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from common.spec.job import PointSpec
from common.spec.quality import QualitySpec
from common.spec.server import ServerOptions
from common.spec.sweep import describe
from common.stats import mean_interval, wilson_interval
from common.wire.models import TensorSpec
from common.wire.quality import Accuracy, Agreement, Quality, Share, TargetError
from common.wire.results import PointResult
from follower.loadgen.bodies import Samples, build_row_bodies
from follower.point.context import PointContext
from follower.point.postprocess import PostprocessError, scores_of
from follower.protocols import PROTOCOLS, Credentials, Endpoint, EndpointError, session

NO_TARGETS = "regression: the request data carries no true values (an npz `targets` array, or a `target` on each JSONL row)"
NO_LABELS = (
    "accuracy: the request data carries no labels (an npz `labels` array, a `label` on each JSONL row, or an images "
    "zip's labels.csv)"
)


def share(hits: int, samples: int) -> Share:
    """`hits` of `samples`, with its 95% Wilson score interval."""
    low, high = wilson_interval(hits, samples) or (0.0, 1.0)
    return Share(hits=hits, samples=samples, value=hits / samples, low=low, high=high)


def hits_at(scores: np.ndarray, truth: np.ndarray, k: int) -> int:
    """How many rows of [n, classes] `scores` hold their true class among their k highest (ties: the lower class first,
    as a stable sort ranks them)."""
    k = min(k, scores.shape[1])
    ranked = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return int((ranked == truth[:, None]).any(axis=1).sum())


def answer_scores(
    inputs: Sequence[TensorSpec],
    samples: Samples,
    *,
    count: int,
    batch_size: int,
    endpoint: Endpoint,
    credentials: Credentials,
) -> np.ndarray | str:
    """The served model's [count, classes] scores for the first `count` samples, or why they cannot be had."""
    # Request i sends rows i*b .. i*b+b-1 (wrapping): only rows below `count` are kept, each once.
    starts = np.arange(0, count, batch_size, dtype=np.int64)
    try:
        bodies, _ = build_row_bodies(inputs, batch_size, samples, starts, protocol=endpoint.protocol)
    except ValueError as exc:  # the data does not fit the model's inputs (its load said so already)
        return str(exc)
    protocol = PROTOCOLS[endpoint.protocol]
    scored: list[np.ndarray] = []
    with session(credentials):  # one connection for the whole pass (HTTP; gRPC calls open a channel each)
        for start, body in zip(starts, bodies, strict=True):
            try:
                scores = scores_of("quality.accuracy", protocol.outputs(endpoint, body, credentials))
            except PostprocessError as exc:
                return str(exc).removeprefix("data.postprocess: ")
            except EndpointError as exc:  # the server stopped answering after the load: the point says so already
                return f"the server did not answer ({exc})"
            take = min(batch_size, count - int(start))
            if scores.shape[0] < take:
                return f"an answer to {batch_size} samples held scores for {scores.shape[0]}"
            scored.append(scores[:take])
    return np.concatenate(scored)


def accuracy_of(scores: np.ndarray, truth: np.ndarray, k: int) -> Accuracy | str:
    """Top-1 (and top-k) accuracy of [n, classes] scores against the first n labels, or why not."""
    n = len(scores)
    if (bad := int(truth[:n].max())) >= scores.shape[1] or (bad := int(truth[:n].min())) < 0:
        return f"accuracy: a label names class {bad}; the answers score classes 0..{scores.shape[1] - 1}"
    k = min(k, scores.shape[1])  # top-k of fewer than k classes is top-(classes): say so, not "top-5 = 100%"
    top1 = share(hits_at(scores, truth[:n], 1), n)
    topk = share(hits_at(scores, truth[:n], k), n) if k > 1 else None
    return Accuracy(top1=top1, k=k, topk=topk)


def agreement_of(scores: np.ndarray, reference: np.ndarray, label: str) -> Agreement | str:
    """The answers' agreement with the reference configuration's to the same samples, or why they cannot be set side by
    side."""
    n = min(len(scores), len(reference))
    if scores.shape[1:] != reference.shape[1:] or n == 0:
        return f"agreement: the answers score {scores.shape[1:]} and the reference's {reference.shape[1:]}"
    a, b = scores[:n].astype(np.float64), reference[:n].astype(np.float64)
    same = int((np.argmax(a, axis=1) == np.argmax(b, axis=1)).sum())
    diff = np.abs(a - b)
    return Agreement(reference=label, top1=share(same, n), max_abs_diff=float(diff.max()), mean_abs_diff=float(diff.mean()))


def reference_label(backend: str, server: ServerOptions) -> str:
    """A configuration as a user reads it: its backend and the options that differ from the defaults."""
    options = describe(server)
    return f"{backend} {options}" if options else f"{backend} (default options)"


async def with_quality(result: PointResult, point: PointSpec, ctx: PointContext) -> PointResult:
    """The point's result with its quality figures, when the job asks for them."""
    spec: QualitySpec | None = ctx.run.quality
    if spec is None or point.llm is not None:
        return result
    if ctx.run.shard is not None and ctx.run.shard.index != 0:  # a sharded point's answers are scored once, by shard 0
        return result
    started = time.perf_counter()
    not_run: list[str] = []
    samples, truth, targets = ctx.run.samples, ctx.run.truth, ctx.run.targets
    asked = {"accuracy": truth if spec.accuracy is not None else None, "regression": targets if spec.regression else None}
    checks = [name for name, wanted in (("accuracy", spec.accuracy is not None), ("regression", spec.regression)) if wanted]
    not_run += [NO_LABELS if name == "accuracy" else NO_TARGETS for name in checks if asked[name] is None]
    accuracy: Accuracy | str | None = None
    error: TargetError | str | None = None
    agreement: Agreement | str | None = None
    known = [len(t) for t in asked.values() if t is not None]
    if known and samples is not None:
        count = min(*known, min(len(v) for v in samples.values()), spec.samples("tensor"))
        scores = (
            "the request data has no samples"
            if count == 0
            else await asyncio.to_thread(
                answer_scores,
                ctx.run.model.inputs,
                samples,
                count=count,
                batch_size=point.batch_size,
                endpoint=ctx.endpoint,
                credentials=ctx.run.credentials,
            )
        )
        if isinstance(scores, str):
            not_run += [f"{name}: {scores}" for name in checks if asked[name] is not None]
        else:
            if spec.accuracy is not None and truth is not None:
                accuracy = accuracy_of(scores, truth, spec.accuracy.top_k)
            if spec.regression and targets is not None:
                error = error_of(scores, targets)
            if spec.agreement:
                agreement = _agreement(scores, point, ctx)
    not_run += [f for f in (accuracy, error, agreement) if isinstance(f, str)]
    quality = Quality(
        accuracy=None if isinstance(accuracy, str) else accuracy,
        error=None if isinstance(error, str) else error,
        agreement=None if isinstance(agreement, str) else agreement,
        not_run=not_run,
        seconds=time.perf_counter() - started,
    ).held_to(spec.min_accuracy)
    return result.model_copy(update={"quality": quality})


def error_of(scores: np.ndarray, targets: np.ndarray) -> TargetError | str:
    """The answers' values ([n, k] scores) against the first n samples' true values ([n, k]), or why not."""
    n = len(scores)
    truth = targets[:n]
    if scores.shape[1] != truth.shape[1]:
        return f"regression: the answers hold {scores.shape[1]} values a sample, the targets {truth.shape[1]}"
    diff = np.abs(scores.astype(np.float64) - truth)
    per_sample = diff.mean(axis=1)
    interval = mean_interval(per_sample)
    return TargetError(
        samples=n,
        values=int(truth.shape[1]),
        mae=float(per_sample.mean()),
        mae_low=max(0.0, interval[0]) if interval else None,  # an absolute error is never below zero
        mae_high=interval[1] if interval else None,
        rmse=float(np.sqrt((diff**2).mean())),
        max_abs=float(diff.max()),
    )


def _agreement(scores: np.ndarray, point: PointSpec, ctx: PointContext) -> Agreement | str:
    """The point's answers against the reference configuration's at its batch size (a point of the reference itself
    keeps its answers as the reference, and agrees with them)."""
    if ctx.run.reference is None:
        return "agreement: no reference configuration"
    backend, server = ctx.run.reference
    label = reference_label(backend, server)
    if (point.backend, point.server) == (backend, server):
        ctx.run.reference_scores.setdefault(point.batch_size, scores)
    reference = ctx.run.reference_scores.get(point.batch_size)
    if reference is None:
        return f"agreement: the reference configuration ({label}) has no answers at batch {point.batch_size} on this follower"
    return agreement_of(scores, reference, label)
