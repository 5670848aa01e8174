"""Names for where a model runs, shared by the spec and the model servers (no imports: servers start fast)."""

from __future__ import annotations

# onnxruntime execution providers that run on an NVIDIA GPU: they take a `device_id` and imply `requires.gpu`.
GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})
