"""Work per sample of an ONNX model, for the roofline: FLOPs of its dense layers and the bytes of its weights."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper


class ModelCost(NamedTuple):
    """FLOPs per sample (MatMul/Gemm against stored weights) and weight bytes read per batch."""

    flops_per_sample: float
    weight_bytes: float


def model_cost(data: bytes) -> ModelCost | None:
    """Count 2·K·N FLOPs per sample for each MatMul/Gemm with an initializer weight; None if nothing countable."""
    try:
        model = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - a model the leader cannot parse simply has no roofline point
        return None
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    flops = 0.0
    for node in model.graph.node:
        if node.op_type not in {"MatMul", "Gemm"} or len(node.input) < 2:
            continue
        weight = weights.get(node.input[1])
        if weight is None or weight.ndim != 2:
            continue
        flops += 2.0 * weight.shape[0] * weight.shape[1]
    if flops == 0:
        return None
    weight_bytes = float(sum(np.asarray(w).nbytes for w in weights.values()))
    return ModelCost(flops_per_sample=flops, weight_bytes=weight_bytes)
