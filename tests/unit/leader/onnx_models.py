"""Tiny ONNX models built with onnx.helper (nothing downloaded), shared by the leader tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def identity_model(*, elem_type: int = TensorProto.FLOAT, dims: tuple[int | str, ...] = ("batch", 4)) -> bytes:
    """x → Identity → y with a dynamic batch dimension; serialized bytes."""
    x = helper.make_tensor_value_info("x", elem_type, list(dims))
    y = helper.make_tensor_value_info("y", elem_type, list(dims))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def linear_model() -> bytes:
    """x[?,3] · W[3,2] + b with W and b as initializers also listed among the graph inputs (old exporters do that)."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 3])
    w_info = helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 2])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 2])
    w = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [0.1] * 6)
    graph = helper.make_graph([helper.make_node("MatMul", ["input", "W"], ["logits"])], "linear", [x, w_info], [out], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()
