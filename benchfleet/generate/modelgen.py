"""Canonical tiny models for tests and demos, built with onnx.helper and numpy (no torch, nothing downloaded)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# onnxruntime 1.18+ reads IR version 9 (opset 17's era); newer onnx writes a newer IR by default.
IR_VERSION = 8


Layer = tuple[np.ndarray, np.ndarray]  # a Gemm's weight [in, out] and bias [out], float32


def mlp_onnx(*, inputs: int = 64, hidden: int = 256, outputs: int = 10, layers: int = 2, seed: int = 0) -> bytes:
    """A seeded MLP (Gemm + Relu per hidden layer, then a Gemm) with input "input" [batch, inputs] FP32 and output "output"."""
    if min(inputs, hidden, outputs, layers) < 1:
        raise ValueError("inputs, hidden, outputs and layers must all be >= 1")
    rng = np.random.default_rng(seed)
    weights: list[Layer] = []
    width = inputs
    for i in range(layers):
        out_width = outputs if i == layers - 1 else hidden
        # He-style scaling keeps activations O(1) through the layers, so outputs are well-conditioned to compare.
        w = (rng.standard_normal((width, out_width)) * np.sqrt(2.0 / width)).astype(np.float32)
        b = (rng.standard_normal(out_width) * 0.01).astype(np.float32)
        weights.append((w, b))
        width = out_width
    return mlp_graph(weights)


def mlp_graph(weights: list[Layer]) -> bytes:
    """The ONNX MLP of these layers (Relu between them): input "input" [batch, in] FP32, output "output" [batch, out]."""
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    current = "input"
    for i, (w, b) in enumerate(weights):
        last = i == len(weights) - 1
        initializers += [
            numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
            numpy_helper.from_array(b.astype(np.float32), f"b{i}"),
        ]
        gemm_out = "output" if last else f"gemm{i}"
        nodes.append(helper.make_node("Gemm", [current, f"w{i}", f"b{i}"], [gemm_out], name=f"gemm{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"relu{i}"], name=f"relu{i}"))
            current = f"relu{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", weights[0][0].shape[0]])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", weights[-1][0].shape[1]])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="benchfleet")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model.SerializeToString()
