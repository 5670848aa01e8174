"""Client-side post-processing (`data.postprocess` with `processing: client`): what a client does with each answer
(the top-k classes of its scores, each class's label looked up), run on the follower on real answers and timed.

The load's answers are not decoded while it runs: decoding on the generator's loop would delay the sends, and the
latency measured is the server's answer as it arrives. After a point's measurement the same server answers up to
SAMPLE_ANSWERS of the point's own request bodies once more, one at a time (the load is over), and the post-processor
runs on each decoded answer; its mean time per answer is the point's `client_stages_ms["postprocess"]`, beside the
pre-processing's. An answer the post-processor cannot read fails the job naming data.postprocess: the submission
checked the model's declared outputs, but an endpoint's answers are known only here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from common.spec.job import PointSpec
from common.wire.results import PointResult
from follower.loadgen.bodies import DEFAULT_VARIANTS, build_bodies
from follower.point.context import PointContext
from follower.protocols import PROTOCOLS, Credentials, Endpoint
from follower.servers.processing import get_processor

SAMPLE_ANSWERS = 16


class PostprocessError(ValueError):
    """The job's client-side post-processor cannot read the server's answers (the message names data.postprocess)."""


def scores_of(name: str, outputs: dict[str, np.ndarray]) -> np.ndarray:
    """The answer's [batch, classes] score output (a float one, as common/spec/processors.py requires of a model);
    PostprocessError naming what the answer held when there is none, or more than one."""
    scores = [array for array in outputs.values() if array.ndim == 2 and array.dtype.kind == "f"]
    if len(scores) != 1:
        held = ", ".join(f"{key} {array.dtype}{list(array.shape)}" for key, array in outputs.items()) or "no outputs"
        raise PostprocessError(f"data.postprocess: {name} ranks one [batch, classes] float score output; the answer held {held}")
    return scores[0]


def postprocess_ms(
    name: str, bodies: Sequence[bytes], *, endpoint: Endpoint, credentials: Credentials, labels: Sequence[str] | None = None
) -> float:
    """Mean ms per answer of post-processor `name` over the answers to up to SAMPLE_ANSWERS of `bodies` (decoding
    the answer is the transport's, not counted)."""
    process = get_processor(name, "post")
    protocol = PROTOCOLS[endpoint.protocol]
    costs = []
    for body in bodies[:SAMPLE_ANSWERS]:
        scores = scores_of(name, protocol.outputs(endpoint, body, credentials))
        started = time.perf_counter_ns()
        process(scores, labels=labels)
        costs.append(time.perf_counter_ns() - started)
    return sum(costs) / len(costs) / 1e6


async def with_client_postprocess(result: PointResult, point: PointSpec, ctx: PointContext) -> PointResult:
    """The point's result with its client-side post-processing cost per request, when the job asks for one."""
    name = ctx.run.postprocess
    if name is None or point.llm is not None or result.ok == 0:  # nothing answered: no answer to post-process
        return result
    inputs, protocol = ctx.run.model.inputs, ctx.endpoint.protocol
    # The point's own first bodies (the same seed draws them in the same order), built only as many as are sent.
    count = min(SAMPLE_ANSWERS, DEFAULT_VARIANTS)
    bodies = build_bodies(inputs, point.batch_size, point.seed, count, protocol=protocol, samples=ctx.run.samples)
    ms = await asyncio.to_thread(
        postprocess_ms, name, bodies, endpoint=ctx.endpoint, credentials=ctx.run.credentials, labels=ctx.run.labels
    )
    return result.model_copy(update={"client_stages_ms": {**(result.client_stages_ms or {}), "postprocess": ms}})
