"""The request processors a job may name (`data.preprocess`, `data.postprocess`), and whether they apply to a model.

The names have their home here, read by the leader at submission; the follower implements each of them
(follower/servers/processing.py, whose registries hold exactly these names). A name that is not here, or a
post-processor the model's outputs cannot feed, is refused at submission (HTTP 422 naming the field), never left to
fail on a follower. Checked at the route, not in the spec's model: a stored spec is validated again on every read.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.spec.job import DataRef

Output = tuple[str, str, Sequence[int]]  # an output tensor's name, KServe datatype and shape (-1: dynamic)

PREPROCESSORS = {
    "image_imagenet": "an image (encoded bytes, or pixels) resized and normalised into a 3×S×S float tensor",
    "tokenize": "a text hashed into a fixed number of INT64 token ids",
}
POSTPROCESSORS = {
    "topk": "the k best classes of a [batch, classes] score output, with their softmax scores and labels",
}
SCORES = frozenset({"FP16", "BF16", "FP32", "FP64"})  # what a score output (logits) may hold


def processing_problem(data: DataRef, ref: str, outputs: Sequence[Output]) -> tuple[str, str] | None:
    """(field, what is wrong) when the job's processors are unknown or cannot apply to the model `ref` with these
    `outputs` (none known: not judged); None when they can."""
    for field, name, known in (
        ("data.preprocess", data.preprocess, PREPROCESSORS),
        ("data.postprocess", data.postprocess, POSTPROCESSORS),
    ):
        if name is not None and name not in known:
            return field, f"unknown processor {name!r}; known: {', '.join(sorted(known))}"
    scores = [o for o in outputs if len(o[2]) == 2 and o[1] in SCORES]
    if data.postprocess == "topk" and outputs and not scores:
        shown = ", ".join(f"{name} {datatype}{list(shape)}" for name, datatype, shape in outputs)
        return "data.postprocess", f"topk ranks a [batch, classes] float score output; {ref} outputs {shown}"
    return None
