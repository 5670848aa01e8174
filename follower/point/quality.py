"""Quality checks (`quality:`) on the point's own server, after its load: how good the answers are, beside how fast.

Accuracy sends the job's labelled request data (its first `max_samples` samples, in order, through the same
client-side processors as under load) in requests of the point's batch size, one at a time, and scores each answer's
class scores against the sample's label: top-1 and top-k, each a share with its 95% Wilson interval. The load is over,
so nothing here touches the point's latency figures; the pass's own wall time is stored beside it. A check that
cannot run (no labels, answers with no class scores, a server that stopped answering) says why on the point instead
of failing the job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from common.spec.job import PointSpec
from common.spec.quality import QualitySpec
from common.stats import wilson_interval
from common.wire.models import TensorSpec
from common.wire.quality import Accuracy, Quality, Share
from common.wire.results import PointResult
from follower.loadgen.bodies import Samples, build_row_bodies
from follower.point.context import PointContext
from follower.point.postprocess import PostprocessError, scores_of
from follower.protocols import PROTOCOLS, Credentials, Endpoint, EndpointError

NO_LABELS = "accuracy: the request data carries no labels (an npz `labels` array, or a `label` on each JSONL row)"


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


def score_accuracy(
    inputs: Sequence[TensorSpec],
    samples: Samples,
    truth: np.ndarray,
    *,
    batch_size: int,
    k: int,
    max_samples: int,
    endpoint: Endpoint,
    credentials: Credentials,
) -> Accuracy | str:
    """The served model's accuracy on the first samples (up to max_samples), or why it cannot be scored."""
    n = min(len(truth), min(len(v) for v in samples.values()), max_samples)
    if n == 0:
        return "accuracy: the request data has no samples"
    # Request i sends rows i*b .. i*b+b-1 (wrapping): only rows below n are scored, each once.
    starts = np.arange(0, n, batch_size, dtype=np.int64)
    bodies, _ = build_row_bodies(inputs, batch_size, samples, starts, protocol=endpoint.protocol)
    protocol = PROTOCOLS[endpoint.protocol]
    scored: list[np.ndarray] = []
    for start, body in zip(starts, bodies, strict=True):
        try:
            scores = scores_of("quality.accuracy", protocol.outputs(endpoint, body, credentials))
        except PostprocessError as exc:
            return f"accuracy: {str(exc).removeprefix('data.postprocess: ')}"
        except EndpointError as exc:  # the server stopped answering after the load: the point says so already
            return f"accuracy: the server did not answer ({exc})"
        take = min(batch_size, n - int(start))
        if scores.shape[0] < take:
            return f"accuracy: an answer to {batch_size} samples held scores for {scores.shape[0]}"
        scored.append(scores[:take])
    all_scores = np.concatenate(scored)
    if (bad := int(truth[:n].max())) >= all_scores.shape[1]:
        return f"accuracy: a label names class {bad}; the answers score {all_scores.shape[1]} classes"
    top1 = share(hits_at(all_scores, truth[:n], 1), n)
    topk = share(hits_at(all_scores, truth[:n], k), n) if k > 1 else None
    return Accuracy(top1=top1, k=k, topk=topk)


async def with_quality(result: PointResult, point: PointSpec, ctx: PointContext) -> PointResult:
    """The point's result with its quality figures, when the job asks for them."""
    spec: QualitySpec | None = ctx.run.quality
    if spec is None or point.llm is not None:
        return result
    started = time.perf_counter()
    not_run: list[str] = []
    accuracy: Accuracy | None = None
    if spec.accuracy is not None:
        if ctx.run.truth is None or ctx.run.samples is None:
            not_run.append(NO_LABELS)
        else:
            scored = await asyncio.to_thread(
                score_accuracy,
                ctx.run.model.inputs,
                ctx.run.samples,
                ctx.run.truth,
                batch_size=point.batch_size,
                k=spec.accuracy.top_k,
                max_samples=spec.max_samples,
                endpoint=ctx.endpoint,
                credentials=ctx.run.credentials,
            )
            if isinstance(scored, str):
                not_run.append(scored)
            else:
                accuracy = scored
    quality = Quality(accuracy=accuracy, not_run=not_run, seconds=time.perf_counter() - started)
    return result.model_copy(update={"quality": quality})
