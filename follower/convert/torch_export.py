"""PyTorch → ONNX (single file or external data) and PyTorch → TorchScript, each checked against the source module."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from follower.convert.check import DEFAULT_ATOL, DEFAULT_RTOL, ConversionCheck, compare, require

OPSET = 17
# onnxruntime reads IR version 8 files from every release we support; newer onnx writes newer IRs.
IR_VERSION = 8


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # torch is the optional `torch` extra
        raise RuntimeError("PyTorch is not installed (pip install 'benchfleet[torch]')") from exc
    return torch


def _source_outputs(module: Any, example: Any) -> list[np.ndarray]:
    torch = _torch()
    with torch.no_grad():
        out = module(example)
    outs = out if isinstance(out, tuple | list) else [out]
    return [o.detach().cpu().numpy() for o in outs]


def to_onnx(
    module: Any,
    example: Any,
    path: Path,
    *,
    input_name: str = "input",
    output_name: str = "output",
    external_data: bool = False,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
) -> ConversionCheck:
    """Export `module` to ONNX at `path` (batch dimension dynamic), then check it with onnxruntime; raises on mismatch.

    With `external_data`, weights go to `path.name + ".data"` beside the graph (needed past protobuf's 2 GiB).
    """
    torch = _torch()
    import onnx
    import onnxruntime as ort

    module = module.eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice; it is the one that takes LSTMs here
        torch.onnx.export(
            module,
            (example,),
            buf,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load_model_from_string(buf.getvalue())
    model.ir_version = IR_VERSION
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if external_data:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=path.name + ".data",
            size_threshold=0,
        )
    else:
        onnx.save_model(model, str(path))
    onnx.checker.check_model(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    actual = session.run(None, {input_name: example.detach().cpu().numpy()})
    expected = _source_outputs(module, example)
    return require(compare("onnx", expected, actual, rtol=rtol, atol=atol, samples=int(example.shape[0])))


def to_torchscript(
    module: Any, example: Any, path: Path, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL
) -> ConversionCheck:
    """Trace `module` to TorchScript at `path`, reload it and check its output; raises on mismatch."""
    torch = _torch()
    module = module.eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, (example,), check_trace=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(path))
    loaded = torch.jit.load(str(path)).eval()
    # A different batch than the trace's proves the batch dimension stayed dynamic.
    probe = torch.cat([example, example], dim=0)
    return require(
        compare(
            "torchscript",
            _source_outputs(module, probe),
            _source_outputs(loaded, probe),
            rtol=rtol,
            atol=atol,
            samples=int(probe.shape[0]),
        )
    )
